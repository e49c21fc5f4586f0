"""ASTRA-sim 2.0 configuration files read into typed settings: network .yml, system .json and
comm-group .json.

Units as ASTRA-sim's analytical backend reads them: ``bandwidth`` in "GB/s" that are 2^30 B/s,
``latency`` and ``endpoint-delay`` in ns, ``local-mem-bw`` in GB/s that are 10^9 B/s (it is
multiplied by 1e9 where the system file is parsed). NPU ``i``'s address has dimension 0 fastest:
coordinate ``d`` is ``(i // prod(npus_count[:d])) % npus_count[d]``.

What ASTRA-sim would reject or genie does not model (double-binary-tree and custom collectives,
the shared-bus memory model, replay-only) is a ``ConfigError`` whose one line names the file and
the key. Keys ASTRA-sim ignores in its analytical runs (logging, tracing, LogGP parameters
without the shared bus) are ignored here too.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.errors import ConfigError
from genie.sim.adapter import ComputeModel

TOPOLOGIES = ("Ring", "Switch", "FullyConnected")
#: system-file key of each collective ASTRA-sim runs on the network, by genie's Chakra name
IMPLEMENTATION_KEYS = {
    "all_reduce": "all-reduce-implementation",
    "reduce_scatter": "reduce-scatter-implementation",
    "all_gather": "all-gather-implementation",
    "all_to_all": "all-to-all-implementation",
}
_UNSUPPORTED_KEYS = {
    "all-reduce-implementation-custom": "custom (Chakra ET) collectives",
    "all-gather-implementation-custom": "custom (Chakra ET) collectives",
    "reduce-scatter-implementation-custom": "custom (Chakra ET) collectives",
    "all-to-all-implementation-custom": "custom (Chakra ET) collectives",
    "per-node-custom-implementation": "custom (Chakra ET) collectives",
}
_IMPL_RE = re.compile(r"^([A-Za-z]+?)(\d{0,5})$")
#: ASTRA-sim's algorithm names -> (algorithm, one ring over every NPU)
_IMPL_NAMES = {
    "ring": ("ring", False),
    "oneRing": ("ring", True),
    "direct": ("direct", False),
    "oneDirect": ("direct", True),
    "halvingDoubling": ("halvingDoubling", False),
    "oneHalvingDoubling": ("halvingDoubling", True),
}
_MAX_NPUS = 1 << 20
MAX_SPLITS = 1 << 16  # chunks per collective: each is simulated message by message


@dataclass(frozen=True)
class AstraNetwork:
    """An analytical network: one building block per dimension."""

    path: str
    topology: tuple[str, ...]
    npus: tuple[int, ...]
    bandwidth: tuple[float, ...]  # ASTRA-sim "GB/s" = 2^30 B/s
    latency: tuple[float, ...]  # ns per hop

    @property
    def dims(self) -> int:
        """Number of dimensions."""
        return len(self.topology)

    @property
    def total_npus(self) -> int:
        """NPUs in all dimensions together."""
        return math.prod(self.npus)

    def address(self, npu: int) -> tuple[int, ...]:
        """Coordinates of ``npu``, dimension 0 fastest."""
        out = []
        for n in self.npus:
            out.append(npu % n)
            npu //= n
        return tuple(out)

    def describe(self) -> str:
        """One line: the dimensions with their units."""
        parts = [
            f"{t}({n}) {bw:g} GiB/s (2^30 B/s), {lat:g} ns"
            for t, n, bw, lat in zip(
                self.topology, self.npus, self.bandwidth, self.latency, strict=True
            )
        ]
        return f"{self.total_npus} NPUs: " + " x ".join(parts) + f" (from {Path(self.path).name})"


@dataclass(frozen=True)
class Implementation:
    """One entry of an ``*-implementation`` list: algorithm, flat (``one*``) and direct window."""

    algorithm: str  # "ring" | "direct" | "halvingDoubling"
    flat: bool = False  # oneRing/oneDirect/oneHalvingDoubling: one ring over every NPU
    window: int = -1  # direct: messages in flight (-1: all n - 1)

    @property
    def name(self) -> str:
        """The name as ASTRA-sim spells it."""
        base = (
            "one" + self.algorithm[0].upper() + self.algorithm[1:] if self.flat else self.algorithm
        )
        return base + (str(self.window) if self.window >= 0 else "")


@dataclass(frozen=True)
class AstraSystem:
    """The system-file settings the analytical model uses."""

    path: str
    implementations: dict[str, tuple[Implementation, ...]]  # by genie collective name
    splits: int  # preferred-dataset-splits
    active_chunks: int  # active-chunks-per-dimension
    endpoint_delay: int  # ns per NPU <-> memory hop of a step (ASTRA-sim's MemBus)
    local_mem_bw: float | None  # GB/s = 10^9 B/s (reductions read twice and write once)
    scheduling: str  # LIFO | FIFO | EXPLICIT
    optimization: str  # baseline | localBWAware
    roofline: bool = False
    peak_perf: float | None = None  # TFLOP/s

    def implementation(self, collective: str, dims: int) -> tuple[Implementation, ...]:
        """The implementation per dimension for ``collective``; ConfigError if unusable."""
        key = IMPLEMENTATION_KEYS[collective]
        impls = self.implementations.get(collective)
        if not impls:
            raise ConfigError(
                f"{self.path}: key {key!r} is missing (the workload has {collective})"
            )
        if impls[0].flat:
            if len(impls) != 1:
                raise ConfigError(
                    f"{self.path}: key {key!r}: {impls[0].name} covers every dimension and must "
                    "be the only entry"
                )
            return impls
        if any(i.flat for i in impls):
            raise ConfigError(f"{self.path}: key {key!r}: one* algorithms must come alone")
        if len(impls) != dims:
            raise ConfigError(
                f"{self.path}: key {key!r} has {len(impls)} entries but the network has {dims} "
                "dimensions (one per dimension)"
            )
        return impls

    def compute_model(self) -> ComputeModel:
        """How compute nodes are timed: their trace duration, or ASTRA-sim's roofline
        (``min(peak-perf, local-mem-bw x num_ops / tensor_size)``) when it is enabled."""
        if not self.roofline:
            return ComputeModel()
        return ComputeModel(
            mode="roofline",
            peak_flops=self.peak_perf * 1e12,  # type: ignore[operator]
            memory_bandwidth=self.local_mem_bw * 1e9,  # type: ignore[operator]
        )

    def describe(self) -> str:
        """One line: algorithms, splits, chunks in flight, delays."""
        algos = ", ".join(
            f"{c}={'+'.join(i.name for i in v)}" for c, v in self.implementations.items()
        )
        mem = f"{self.local_mem_bw:g} GB/s" if self.local_mem_bw else "unset"
        roof = f", roofline {self.peak_perf:g} TFLOP/s" if self.roofline else ""
        return (
            f"{algos}; {self.splits} splits, {self.active_chunks} active chunk(s) per dimension, "
            f"endpoint delay {self.endpoint_delay} ns, local memory {mem} (10^9 B/s), "
            f"{self.optimization}{roof} (from {Path(self.path).name})"
        )


def _read(path: str | Path, what: str) -> str:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > 16 * 2**20:
            raise ConfigError(f"{p}: {size} bytes is too large for an ASTRA-sim {what} file")
        return p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such ASTRA-sim {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the ASTRA-sim {what} file: {exc}") from None


def _number_list(path: str, doc: dict, key: str, kind: type, dims: int | None) -> list:
    if key not in doc:
        raise ConfigError(f"{path}: key {key!r} is missing")
    raw = doc[key]
    vals = raw if isinstance(raw, list) else [raw]
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigError(f"{path}: key {key!r}: {v!r} is not a number")
        if kind is int and v != int(v):
            raise ConfigError(f"{path}: key {key!r}: {v!r} is not a whole number")
        if not math.isfinite(v):
            raise ConfigError(f"{path}: key {key!r}: {v!r} is not finite")
        out.append(kind(v))
    if dims is not None and len(out) != dims:
        raise ConfigError(
            f"{path}: key {key!r} has {len(out)} entries but 'topology' has {dims} dimensions"
        )
    return out


def load_network(path: str | Path) -> AstraNetwork:
    """Read an ASTRA-sim analytical network ``.yml`` (topology, npus_count, bandwidth, latency)."""
    import yaml

    p = str(path)
    text = _read(path, "network")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: not valid YAML{where}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: expected a mapping with keys topology, npus_count, ...")
    if "topology" not in doc:
        raise ConfigError(f"{p}: key 'topology' is missing")
    topo = doc["topology"] if isinstance(doc["topology"], list) else [doc["topology"]]
    if not topo:
        raise ConfigError(f"{p}: key 'topology' is empty")
    for t in topo:
        if t not in TOPOLOGIES:
            raise ConfigError(
                f"{p}: key 'topology': {t!r} is not supported (use {', '.join(TOPOLOGIES)})"
            )
    dims = len(topo)
    if dims > 4:  # a node without involved_dim involves 4 dimensions in ASTRA-sim 2.0
        raise ConfigError(f"{p}: key 'topology': {dims} dimensions; ASTRA-sim 2.0 runs at most 4")
    npus = _number_list(p, doc, "npus_count", int, dims)
    bw = _number_list(p, doc, "bandwidth", float, dims)
    lat = _number_list(p, doc, "latency", float, dims)
    if any(n <= 1 for n in npus):
        raise ConfigError(f"{p}: key 'npus_count': every dimension needs at least 2 NPUs")
    if math.prod(npus) > _MAX_NPUS:
        raise ConfigError(f"{p}: key 'npus_count': more than {_MAX_NPUS} NPUs")
    if any(b <= 0 for b in bw):
        raise ConfigError(f"{p}: key 'bandwidth': must be > 0 (GB/s = 2^30 B/s)")
    if any(x < 0 for x in lat):
        raise ConfigError(f"{p}: key 'latency': must be >= 0 ns")
    return AstraNetwork(p, tuple(topo), tuple(npus), tuple(bw), tuple(lat))


def _implementation(path: str, key: str, text: Any) -> Implementation:
    m = _IMPL_RE.match(text) if isinstance(text, str) else None
    if m is None or (m.group(1) not in _IMPL_NAMES and m.group(1) != "doubleBinaryTree"):
        raise ConfigError(
            f"{path}: key {key!r}: unknown algorithm {text!r} (ring, direct, directN, "
            "halvingDoubling, oneRing, oneDirect, oneHalvingDoubling)"
        )
    if m.group(1) == "doubleBinaryTree":
        raise ConfigError(
            f"{path}: key {key!r}: {text!r} is not modelled by genie's ASTRA-sim mode "
            "(ring, direct, halvingDoubling and their one* forms are)"
        )
    algo, flat = _IMPL_NAMES[m.group(1)]
    window = -1
    if m.group(2):
        if algo != "direct":
            raise ConfigError(f"{path}: key {key!r}: {text!r}: only direct takes a window")
        window = int(m.group(2))
        if window < 1:
            raise ConfigError(f"{path}: key {key!r}: {text!r}: the window must be >= 1")
    return Implementation(algo, flat, window)


def _int_key(path: str, doc: dict, key: str, default: int, low: int, high: int) -> int:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or not low <= v <= high:
        raise ConfigError(f"{path}: key {key!r}: {v!r} must be a whole number in {low}..{high}")
    return int(v)


def _json_object(path: str | Path, what: str, shape: str) -> dict:
    try:
        doc = json.loads(_read(path, what))
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected {shape}")
    return doc


def load_system(path: str | Path) -> AstraSystem:
    """Read an ASTRA-sim system ``.json``: collective implementations, splits, chunks, delays."""
    p = str(path)
    doc = _json_object(path, "system", "a JSON object of settings")
    for key, what in _UNSUPPORTED_KEYS.items():
        if key in doc:
            raise ConfigError(f"{p}: key {key!r}: {what} are not modelled by genie")
    if doc.get("model-shared-bus", 0) not in (0, False):
        raise ConfigError(f"{p}: key 'model-shared-bus': the LogGP shared bus is not modelled")
    if doc.get("replay-only", 0) not in (0, False):
        raise ConfigError(f"{p}: key 'replay-only': replaying collectives is not modelled")
    impls: dict[str, tuple[Implementation, ...]] = {}
    for coll, key in IMPLEMENTATION_KEYS.items():
        if key in doc:
            raw = doc[key]
            if not isinstance(raw, list) or not raw:
                raise ConfigError(f"{p}: key {key!r}: expected a list, one algorithm per dimension")
            impls[coll] = tuple(_implementation(p, key, x) for x in raw)
    if "preferred-dataset-splits" not in doc:
        raise ConfigError(f"{p}: key 'preferred-dataset-splits' is missing")
    splits = _int_key(p, doc, "preferred-dataset-splits", 1, 1, MAX_SPLITS)
    chunks = _int_key(p, doc, "active-chunks-per-dimension", 1, 1, MAX_SPLITS)
    # ASTRA-sim stores endpoint-delay in an int (its default is 10 ns); 0 aborts its event queue
    delay = _int_key(p, doc, "endpoint-delay", 10, 1, 2**31 - 1)
    mem = doc.get("local-mem-bw")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int | float) or mem <= 0):
        raise ConfigError(f"{p}: key 'local-mem-bw': {mem!r} must be > 0 (GB/s = 10^9 B/s)")
    sched = doc.get("scheduling-policy", "LIFO")
    if sched not in ("LIFO", "FIFO", "EXPLICIT"):
        raise ConfigError(f"{p}: key 'scheduling-policy': {sched!r} (LIFO, FIFO or EXPLICIT)")
    opt = doc.get("collective-optimization", "baseline")
    if opt not in ("baseline", "localBWAware"):
        raise ConfigError(f"{p}: key 'collective-optimization': {opt!r} (baseline or localBWAware)")
    roof = doc.get("roofline-enabled", 0) not in (0, False)
    peak = doc.get("peak-perf")
    if roof and (
        isinstance(peak, bool) or not isinstance(peak, int | float) or peak <= 0 or mem is None
    ):
        raise ConfigError(
            f"{p}: key 'roofline-enabled' needs 'peak-perf' (TFLOP/s) and 'local-mem-bw' > 0"
        )
    return AstraSystem(
        path=p,
        implementations=impls,
        splits=splits,
        active_chunks=chunks,
        endpoint_delay=delay,
        local_mem_bw=float(mem) if mem is not None else None,
        scheduling=sched,
        optimization=opt,
        roofline=roof,
        peak_perf=float(peak) if roof and peak is not None else None,
    )


def load_comm_groups(path: str | Path, n_ranks: int) -> dict[str, tuple[int, ...]]:
    """Read a comm-group ``.json`` (``{"<pg_name>": [global ranks]}``) for ``n_ranks`` ranks."""
    p = str(path)
    doc = _json_object(path, "comm-group", '{"<pg_name>": [ranks...]}')
    groups: dict[str, tuple[int, ...]] = {}
    for name, members in doc.items():
        if not isinstance(members, list) or not members:
            raise ConfigError(f"{p}: key {name!r}: expected a non-empty list of ranks")
        for r in members:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n_ranks:
                raise ConfigError(
                    f"{p}: key {name!r}: {r!r} is not a rank of this {n_ranks}-rank workload"
                )
        if len(set(members)) != len(members):
            raise ConfigError(f"{p}: key {name!r}: a rank is listed twice")
        groups[str(name)] = tuple(members)
    return groups
