"""Turn a parsed SPMD HLO module into a genie Workload: one Chakra graph per rank.

Rank r is partition r (device r of the mesh; replica r when the module has one partition).

* Collectives (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``, their ``-start``
  forms and ``async-start`` wrappers) become COMM_COLL nodes; ``comm_size`` is the bytes of the
  operands, which is ASTRA-sim's convention (the whole buffer, the per-rank shard for
  all-gather). Groups come from ``replica_groups``; a group of all ranks is the default group
  ``""``, any other is named after the mesh axes it spans (``tp_dp0``) and recorded in the
  workload's groups. ``collective-permute`` becomes COMM_SEND/COMM_RECV pairs.
* Dots and convolutions, bare or inside fusions, carry ``num_ops`` = 2*M*N*K; every other op
  that does work is a memory-bound compute node with ``tensor_size`` = operand + result bytes.
  Duration = max(flops / (peak x efficiency), bytes / memory bandwidth), in whole
  microseconds with the rounding error carried to the next node (tiny ops may get 0 us; a
  rank's total is within 1 us of the exact sum).
* Dependencies follow the dataflow (tuples tracked per element). A synchronous collective, or
  the ``-done`` of an async pair, is a point where the compute stream waits: the next compute
  node depends on it. Compute scheduled between a ``-start`` and its ``-done`` does not, so the
  pair overlaps compute as XLA scheduled it.
* ``call`` is inlined; ``while`` is unrolled by its ``known_trip_count`` (once, with a note,
  when unknown); ``conditional`` takes branch 0, with a note.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from genie.capture.hlo import (
    Computation,
    HloModule,
    Instruction,
    Shape,
    int_list,
    known_trip_count,
    parse_pairs,
    parse_replica_groups,
    parse_shape,
)
from genie.errors import TraceFormatError
from genie.workload.generators.builder import H100_BF16_FLOPS, RankBuilder, finish
from genie.workload.model import DEFAULT_GROUP, CollectiveType, Workload

#: H100 SXM HBM3 bandwidth, bytes/s (10^12 = TB/s).
H100_HBM_BYTES_PER_S = 3.35e12
#: Most while-loop iterations unrolled into the trace.
MAX_UNROLL = 4096

#: HLO collective ops that become one Chakra collective each.
GROUP_COLLECTIVES = {
    "all-reduce": CollectiveType.ALL_REDUCE,
    "all-gather": CollectiveType.ALL_GATHER,
    "reduce-scatter": CollectiveType.REDUCE_SCATTER,
    "all-to-all": CollectiveType.ALL_TO_ALL,
    "collective-broadcast": CollectiveType.BROADCAST,
}
#: Every HLO collective op: those, and collective-permute (send/recv pairs).
COLLECTIVES = {*GROUP_COLLECTIVES, "collective-permute"}
#: Ops that move no data of their own: the value flows through.
PASS_THROUGH = {"bitcast", "opt-barrier", "domain", "copy-start", "copy-done", "async-update"}
#: Ops that produce a value without work.
FREE = {"constant", "partition-id", "replica-id", "after-all"}


@dataclass
class CaptureCost:
    """How durations are derived from FLOPs and bytes."""

    peak_flops: float = H100_BF16_FLOPS
    efficiency: float = 0.5
    memory_bandwidth: float = H100_HBM_BYTES_PER_S

    def seconds(self, flops: float, nbytes: float) -> float:
        """Roofline time of one op."""
        return max(flops / (self.peak_flops * self.efficiency), nbytes / self.memory_bandwidth)


@dataclass
class CollectiveRecord:
    """One collective a rank issues (for summaries and tests)."""

    op: str
    comm_type: CollectiveType | None
    size: int
    group: tuple[int, ...]
    pg_name: str
    hlo_name: str


@dataclass
class RankStats:
    """What one rank's graph holds."""

    flops: int = 0
    compute_nodes: int = 0
    memory_bytes: int = 0
    collectives: list[CollectiveRecord] = field(default_factory=list)


@dataclass
class Conversion:
    """The result of converting an HLO module: the workload and per-rank figures."""

    workload: Workload
    stats: list[RankStats]
    notes: list[str]


# ------------------------------------------------------------------ FLOPs


def _operand_shapes(inst: Instruction, comp: Computation) -> list[Shape]:
    inline = []
    if "[" in inst.operand_text:  # newer XLA prints operand shapes inline
        from genie.capture.hlo import split_top

        for part in split_top(inst.operand_text):
            try:
                inline.append(parse_shape(part)[0])
            except TraceFormatError:
                inline = []
                break
    if len(inline) == len(inst.operands):
        return inline
    out = []
    for name in inst.operands:
        src = comp.by_name.get(name)
        if src is None:
            raise TraceFormatError(f"HLO: {inst.name} uses {name!r}, not defined in {comp.name}")
        out.append(src.shape)
    return out


def dot_flops(inst: Instruction, operand_shapes: Sequence[Shape]) -> int:
    """2 x output elements x contracted elements of a ``dot``."""
    lhs = operand_shapes[0]
    dims = int_list(inst.attrs.get("lhs_contracting_dims", "{}"))
    k = math.prod(lhs.dims[d] for d in dims) if dims else 1
    return 2 * inst.shape.num_elements * k


def conv_flops(inst: Instruction, operand_shapes: Sequence[Shape]) -> int:
    """2 x output elements x kernel elements per output feature of a ``convolution``."""
    kernel = operand_shapes[1]
    labels = inst.attrs.get("dim_labels", "")
    m = re.match(r"[^_]+_([^-]+)->", labels)
    per_out = math.prod(kernel.dims)
    if m and "o" in m.group(1) and len(m.group(1)) == len(kernel.dims):
        per_out //= max(1, kernel.dims[m.group(1).index("o")])
    return 2 * inst.shape.num_elements * per_out


class FlopCounter:
    """FLOPs of dots and convolutions in a computation and what it calls (memoized)."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self._memo: dict[str, int] = {}

    def of_instruction(self, inst: Instruction, comp: Computation) -> int:
        """FLOPs of one instruction (a fusion: of its fused computation)."""
        if inst.opcode == "dot":
            return dot_flops(inst, _operand_shapes(inst, comp))
        if inst.opcode == "convolution":
            return conv_flops(inst, _operand_shapes(inst, comp))
        if inst.opcode == "fusion":
            return sum(self.of_computation(c) for c in inst.called())
        return 0

    def of_computation(self, name: str) -> int:
        """FLOPs of a whole computation."""
        if name not in self._memo:
            comp = self.module.computations.get(name)
            if comp is None:
                raise TraceFormatError(f"HLO: computation {name!r} is called but not defined")
            self._memo[name] = 0
            self._memo[name] = sum(self.of_instruction(i, comp) for i in comp.instructions)
        return self._memo[name]


# ------------------------------------------------------------------ groups


class GroupNamer:
    """Names process groups after the mesh axes they span; records members by name."""

    def __init__(self, n_ranks: int, mesh: Sequence[tuple[str, int]] | None) -> None:
        self.n = n_ranks
        self.mesh = list(mesh) if mesh and math.prod(s for _, s in mesh) == n_ranks else None
        self.groups: dict[str, tuple[int, ...]] = {}
        self._names: dict[tuple[int, ...], str] = {}

    def name(self, members: tuple[int, ...]) -> str:
        """The pg_name of a group of global ranks (``""`` for all ranks)."""
        key = tuple(sorted(members))
        if key == tuple(range(self.n)):
            return DEFAULT_GROUP
        if key in self._names:
            return self._names[key]
        name = self._mesh_name(key) or "ranks_" + "_".join(map(str, key))
        base, k = name, 1
        while name in self.groups and self.groups[name] != key:
            k += 1
            name = f"{base}_{k}"
        self._names[key] = name
        self.groups[name] = key
        return name

    def _mesh_name(self, key: tuple[int, ...]) -> str | None:
        if not self.mesh:
            return None
        import numpy as np

        shape = [s for _, s in self.mesh]
        coords = np.array(np.unravel_index(list(key), shape)).T
        varying = [i for i in range(len(shape)) if len(set(coords[:, i])) > 1]
        if math.prod(shape[i] for i in varying) != len(key):
            return None
        fixed = [f"{self.mesh[i][0]}{coords[0, i]}" for i in range(len(shape)) if i not in varying]
        return "_".join(["+".join(self.mesh[i][0] for i in varying), *fixed])


# ------------------------------------------------------------------ emission

Value = set | list  # a set of node ids, or a tuple of values


def _flat(v: Value) -> set[int]:
    if isinstance(v, set):
        return v
    out: set[int] = set()
    for e in v:
        out |= _flat(e)
    return out


class _RankEmitter:
    """Walks the entry computation for one rank and appends its nodes."""

    def __init__(self, conv: HloConverter, rank: int) -> None:
        self.c = conv
        self.rank = rank
        self.b = RankBuilder(rank)
        self.stats = RankStats()
        self.pending: set[int] = set()  # collectives the compute stream waits for next
        self.seq = 0  # collective-permute occurrences (send/recv tags)
        self.suffix = ""
        self.exact_us = 0.0  # exact compute time so far, microseconds
        self.emitted_us = 0  # whole microseconds written so far

    def run(self, comp: Computation, args: list[Value]) -> Value:
        env: dict[str, Value] = {}
        for inst in comp.instructions:
            env[inst.name] = self.step(inst, comp, env, args)
        return env[comp.root.name]

    def step(self, inst: Instruction, comp: Computation, env: dict, args: list[Value]) -> Value:
        op = inst.opcode
        vals = [env.get(o, set()) for o in inst.operands]
        if op == "parameter":
            idx = int(inst.operand_text.strip() or 0)
            return args[idx] if idx < len(args) else set()
        if op in FREE:
            return set()
        if op == "get-tuple-element":
            v = vals[0]
            idx = int(inst.attrs.get("index", 0))
            return v[idx] if isinstance(v, list) and idx < len(v) else _flat(v)
        if op == "tuple":
            return list(vals)
        if op in PASS_THROUGH or op == "add-dependency":
            if op == "add-dependency":
                return {*_flat(vals[0]), *_flat(vals[1])} if len(vals) > 1 else vals[0]
            return vals[0] if vals else set()
        base = op.removesuffix("-start")
        if base in COLLECTIVES:
            ids = self.collective(base, inst, comp, vals)
            if op.endswith("-start"):
                return ids
            self.pending |= ids
            return ids
        if op.endswith("-done"):
            v = _flat(vals[0]) if vals else set()
            self.pending |= v
            return v
        if op == "async-start":
            called = self.c.module.computations[inst.called()[0]]
            root = called.root
            if root.opcode.removesuffix("-start") in COLLECTIVES:
                base = root.opcode.removesuffix("-start")
                return self.collective(base, root, called, vals, label=inst.name)
            return self.run(called, vals)
        if op == "call":
            return self.run(self.c.module.computations[inst.called()[0]], vals)
        if op == "while":
            return self.loop(inst, vals)
        if op == "conditional":
            branches = inst.called()
            self.c.note(f"{inst.name}: conditional captured as its first branch {branches[0]}")
            return self.run(self.c.module.computations[branches[0]], vals[1:2])
        return self.compute(inst, comp, vals)

    def loop(self, inst: Instruction, vals: list[Value]) -> Value:
        body = self.c.module.computations[inst.attrs["body"].lstrip("%")]
        trips = known_trip_count(inst)
        if trips is None:
            self.c.note(f"{inst.name}: while loop with unknown trip count captured once")
            trips = 1
        if trips > MAX_UNROLL:
            self.c.note(f"{inst.name}: {trips} iterations, {MAX_UNROLL} unrolled")
            trips = MAX_UNROLL
        state = vals[0] if vals else set()
        outer = self.suffix
        for k in range(trips):
            self.suffix = f"{outer}@{inst.name}#{k}"
            state = self.run(body, [state])
        self.suffix = outer
        return state

    def compute(self, inst: Instruction, comp: Computation, vals: list[Value]) -> Value:
        flops = self.c.flops.of_instruction(inst, comp)
        shapes = _operand_shapes(inst, comp)
        nbytes = inst.shape.nbytes + sum(s.nbytes for s in shapes)
        deps = set().union(*(_flat(v) for v in vals)) | self.pending
        self.pending = set()
        seconds = self.c.cost.seconds(flops, nbytes)
        nid = self.b.compute(
            inst.name + self.suffix,
            seconds,
            deps,
            flops=flops if flops else None,
            tensor_bytes=nbytes,
        )
        # whole microseconds with the rounding error carried forward: sub-microsecond ops may
        # get 0 us, and the rank's compute total stays within 1 us of the exact sum
        self.exact_us += seconds * 1e6
        target = round(self.exact_us)
        self.b.nodes[nid].duration_micros = target - self.emitted_us
        self.emitted_us = target
        self.stats.flops += flops
        self.stats.compute_nodes += 1
        self.stats.memory_bytes += nbytes
        return {nid}

    def collective(
        self,
        base: str,
        inst: Instruction,
        comp: Computation,
        vals: list[Value],
        label: str | None = None,
    ) -> set[int]:
        size = sum(s.nbytes for s in _operand_shapes(inst, comp))
        deps = set().union(*(_flat(v) for v in vals))
        name = (label or inst.name) + self.suffix
        if base == "collective-permute":
            return self.permute(inst, name, size, deps)
        if self.c.local_only(inst):
            return deps
        groups = parse_replica_groups(inst.attrs.get("replica_groups"), self.c.n_ranks)
        mine = next((g for g in groups if self.rank in g), None)
        if mine is None or len(mine) < 2:
            return deps
        pg = self.c.namer.name(mine)
        ctype = GROUP_COLLECTIVES[base]
        nid = self.b.collective(name, ctype, size, deps, pg=pg)
        self.stats.collectives.append(CollectiveRecord(base, ctype, size, mine, pg, inst.name))
        return {nid}

    def permute(self, inst: Instruction, name: str, size: int, deps: set[int]) -> set[int]:
        pairs = parse_pairs(inst.attrs.get("source_target_pairs", "{}"))
        tag = self.seq
        self.seq += 1
        out: set[int] = set()
        for src, dst in pairs:
            if src == dst:
                continue
            if src == self.rank:
                out.add(self.b.send(f"{name}.send{dst}", dst, size, tag, deps))
                rec = CollectiveRecord("send", None, size, (src, dst), "", inst.name)
                self.stats.collectives.append(rec)
            if dst == self.rank:
                out.add(self.b.recv(f"{name}.recv{src}", src, size, tag, deps))
                rec = CollectiveRecord("recv", None, size, (src, dst), "", inst.name)
                self.stats.collectives.append(rec)
        return out or deps


class HloConverter:
    """Converts one parsed HLO module into per-rank graphs."""

    def __init__(
        self,
        module: HloModule,
        *,
        mesh: Sequence[tuple[str, int]] | None = None,
        cost: CaptureCost | None = None,
    ) -> None:
        self.module = module
        self.n_ranks = module.num_partitions if module.num_partitions > 1 else module.num_replicas
        self.cost = cost or CaptureCost()
        self.flops = FlopCounter(module)
        self.namer = GroupNamer(self.n_ranks, mesh)
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        """Record a note once."""
        if text not in self.notes:
            self.notes.append(text)

    def local_only(self, inst: Instruction) -> bool:
        """True for a cross-replica collective in a one-replica, many-partition module."""
        return (
            "channel_id" not in inst.attrs
            and "use_global_device_ids" not in inst.attrs
            and self.module.num_partitions > 1
            and self.module.num_replicas == 1
        )

    def convert(self, name: str = "capture", params: dict | None = None) -> Conversion:
        """Emit every rank; returns the workload (groups recorded) and per-rank stats."""
        emitters = []
        for r in range(self.n_ranks):
            e = _RankEmitter(self, r)
            e.run(self.module.entry_computation, [])
            emitters.append(e)
        wl = finish(name, [e.b for e in emitters], self.namer.groups, params)
        return Conversion(wl, [e.stats for e in emitters], list(self.notes))


def hlo_to_workload(
    module: HloModule,
    *,
    mesh: Sequence[tuple[str, int]] | None = None,
    cost: CaptureCost | None = None,
    name: str = "capture",
    params: dict | None = None,
) -> Conversion:
    """Convert a parsed SPMD HLO module into a Workload with one graph per rank."""
    return HloConverter(module, mesh=mesh, cost=cost).convert(name, params)
