"""The analytical cost model: the time of step programs on a topology, with fair link sharing.

Every SEND is a flow along its route; a link divides its bandwidth equally among the flows on
it and a flow runs at its tightest share; the message lands after the route's latency (the sum
of its link latencies: ASTRA-sim's hops x latency, plus the topology's per-message cost, zero
unless calibrated); a calibrated topology's per-step overhead is spent by each rank's software on
every SEND, REDUCE and COPY, one step after another (``genie.collectives.flowsim``). Ranks on
one host use a private intra-host port per sending rank. An NCCL-style program
(``genie.collectives.nccl_wire``) puts each channel's messages on a connection of its own and
its protocol's framing on the links (``link_bytes`` count it). ``estimate`` prices one program,
``estimate_concurrent`` several in flight together on the same links.

Exact shortcut: a rotation-symmetric program (ring, direct, pairwise) whose shards are all the
same size, with rank i on host i of a uniform switch, fully-connected network or ring, makes
every rank time alike, and the load on every link is a rotated copy of rank 0's (likewise
halving-doubling on 2^k ranks, symmetric under XOR, on a switch or fully-connected); so simulating
rank 0 alone against link classes gives the same answer as the full simulation at 1/n of the
work (tests check that both agree). With uneven shards the full simulation runs instead, unless
the program is too big for it; then the shortcut is used and the Cost says "symmetric-approx".

Exact shortcut two: a rotation-symmetric program with uniform shards whose messages never share
a link or port with another connection's (a ring contiguous per leaf on a leaf-spine, any
placement of a ring on a switch) is priced by a max-plus recurrence over rank 0's steps for all
ranks at once (``genie.collectives.contention_free``, its proof obligations checked at run
time; method "contention-free", every figure bit-equal to the event simulation's, which stays
the reference: ``symmetric=False`` or ``contention_free=False``).

Closed forms and nccl-tests' algbw / busbw live in ``genie.vocabulary``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec

from genie.collectives.emit import gc_paused
from genie.collectives.flowsim import FlowSim, Instance
from genie.collectives.layout import buffer_bytes, chunk_segments
from genie.collectives.nccl_wire import channel_fn, wire_fn
from genie.collectives.program import Op, Program, Step
from genie.collectives.registry import ROTATION_SYMMETRIC, XOR_SYMMETRIC
from genie.collectives.topology import Topology
from genie.errors import CollectiveError, TopologyError

Placement = Sequence[int | str] | Mapping[int, int | str] | None

# The full event simulation takes at most this many steps (all ranks); beyond it, a program the
# symmetric shortcut applies to is priced by it even when uneven shards make it approximate
# (method "symmetric-approx": rank 0 stands for every rank), and any other is refused.
EVENT_STEP_LIMIT = 4_000_000


class Cost(msgspec.Struct, kw_only=True):
    """What a program costs on a topology."""

    time_s: float  # from the program's start to its last step
    # link id -> bytes carried (fractions where flows split; a protocol's framing included)
    link_bytes: dict[int, float]
    intra_bytes: int  # bytes between ranks on the same host
    messages: int  # SENDs in the whole program
    bytes_sent: int  # bytes of all SENDs
    steps: int  # steps simulated (one rank's with the shortcut)
    method: str  # "symmetric" or "event"
    bottleneck_s: float  # max over links of bytes / bandwidth: a lower bound from bandwidth alone
    start_s: float = 0.0
    rank_finish_s: list[float] = []  # per rank, from the program's start (event method only)


# -- placement ---------------------------------------------------------------------------


def resolve_placement(program: Program, topology: Topology, placement: Placement) -> list[int]:
    """Host index of each group rank (default: rank i on host i // ranks_per_host)."""
    n = program.n_ranks
    if placement is None:
        k = program.spec.ranks_per_host
        hosts = [r // k for r in range(n)]
        if hosts and hosts[-1] >= topology.n_hosts:
            raise TopologyError(
                f"{n} ranks at {k} per host need {hosts[-1] + 1} hosts; "
                f"the topology has {topology.n_hosts}"
            )
        return hosts
    if isinstance(placement, Mapping):
        missing = [r for r in range(n) if r not in placement]
        if missing:
            raise TopologyError(f"placement has no host for ranks {missing[:8]}")
        return [topology.host_index(placement[r]) for r in range(n)]
    if len(placement) != n:
        raise TopologyError(f"placement lists {len(placement)} hosts for {n} ranks")
    return [topology.host_index(h) for h in placement]


def _is_identity(hosts: list[int]) -> bool:
    return all(h == i for i, h in enumerate(hosts))


# -- instances ---------------------------------------------------------------------------


def _event_instance(
    program: Program, topology: Topology, hosts: list[int], start: float
) -> Instance:
    """All ranks of ``program``; same-host sends use the sender's intra-host port, which
    programs in flight together share (it is keyed by global rank)."""
    spec = program.spec

    def route_of(r: int, st: Step):
        a, b = hosts[r], hosts[st.peer]
        if topology.same_server(a, b):
            return ((("intra", spec.global_rank(r)), 1.0),), topology.intra_latency
        return topology.flow_route(a, b, spec.global_rank(r), spec.global_rank(st.peer), st.nbytes)

    steps = [program.steps(r) for r in range(program.n_ranks)]
    return Instance(
        steps,
        route_of,
        send_key=lambda r, st, k: (r, st.peer, st.tag, k),
        recv_key=lambda r, st, k: (st.peer, r, st.tag, k),
        start=start,
        name=repr(program),
        wire=wire_fn(spec),
        channel=channel_fn(spec),
    )


def _capacity(topology: Topology):
    links = topology.links

    def cap(key):
        if isinstance(key, int):
            return links[key].bandwidth
        return topology.intra_bandwidth

    return cap


def _bottleneck(topology: Topology, link_bytes: Mapping[int, float], intra: Mapping) -> float:
    t = 0.0
    for lid, b in link_bytes.items():
        t = max(t, b / topology.links[lid].bandwidth)
    for b in intra.values():
        t = max(t, b / topology.intra_bandwidth)
    return t


def _make_cost(program, topology, inst: Instance, link_bytes, intra, method) -> Cost:
    return Cost(
        time_s=max(inst.finish) - inst.start if inst.finish else 0.0,
        link_bytes=dict(link_bytes),
        intra_bytes=sum(intra.values()),
        messages=inst.messages,
        bytes_sent=inst.bytes_sent,
        steps=inst.total,
        method=method,
        bottleneck_s=_bottleneck(topology, link_bytes, intra),
        start_s=inst.start,
        rank_finish_s=[f - inst.start for f in inst.finish],
    )


def estimate_concurrent(
    items: Sequence[tuple[Program, float] | tuple[Program, float, Placement]],
    topology: Topology,
    *,
    compute_bandwidth: float | None = None,
    max_steps: int | None = None,
    max_work: int = 10_000_000,
) -> list[Cost]:
    """Price programs that run together, each from its start time (s), sharing links fairly.

    Every rank's steps are simulated; more than ``max_steps`` (default ``EVENT_STEP_LIMIT``) in
    all is refused with a CollectiveError rather than left to run for minutes, and so is a run
    that re-rates flows more than ``max_work`` times (thousands of flows on one link).
    """
    limit = EVENT_STEP_LIMIT if max_steps is None else max_steps
    total = sum(item[0].n_ranks * len(item[0].steps(0)) for item in items)
    if total > limit:
        raise CollectiveError(
            f"about {total:,} steps to simulate in full (limit {limit:,}); use fewer ranks or "
            "chunks, or a uniform switch/ring/fully_connected topology with rank i on host i "
            "(ring, direct and pairwise programs are then priced from one rank)"
        )
    accounts: list[tuple[dict[int, float], dict]] = []  # per program: link bytes, intra bytes

    def on_send(inst: Instance, r: int, st: Step, res) -> None:
        lb, intra = accounts[inst.index]
        nbytes = st.nbytes if inst.wire is None else inst.wire(st.nbytes)  # framing included
        for key, w in res:  # w: the fraction of the message's bytes on that resource
            if isinstance(key, int):
                lb[key] = lb.get(key, 0) + nbytes * w
            else:
                intra[key] = intra.get(key, 0) + nbytes * w

    sim = FlowSim(_capacity(topology), compute_bandwidth, on_send, max_work, topology.step_overhead)
    insts: list[Instance] = []
    with gc_paused():
        for j, item in enumerate(items):
            program, start = item[0], float(item[1])
            placement = item[2] if len(item) > 2 else None
            if not (math.isfinite(start) and start >= 0):
                raise CollectiveError(f"start time must be a non-negative number: {start}")
            hosts = resolve_placement(program, topology, placement)
            inst = _event_instance(program, topology, hosts, start)
            inst.index = j
            accounts.append(({}, {}))
            insts.append(inst)
            sim.add(inst)
        sim.run()
    return [
        _make_cost(items[j][0], topology, inst, *accounts[j], "event")
        for j, inst in enumerate(insts)
    ]


def estimate(
    program: Program,
    topology: Topology,
    placement: Placement = None,
    *,
    compute_bandwidth: float | None = None,
    symmetric: bool | None = None,
    contention_free: bool | None = None,
) -> Cost:
    """Price one program; uses the exact shortcuts when they apply: the symmetric one, then
    the contention-free one (``genie.collectives.contention_free``). ``symmetric=False`` runs
    the full event simulation (the reference) unless ``contention_free=True``, which insists
    on the contention-free shortcut (CollectiveError where it does not apply);
    ``contention_free=False`` turns that one off alone."""
    hosts = resolve_placement(program, topology, placement)
    group = _symmetry_group(program, topology, hosts)
    if symmetric and group is None:
        raise CollectiveError(f"the symmetric shortcut does not apply to {program!r} here")
    if group is not None and symmetric is not False and not contention_free:
        exact = uniform_shards(program.spec)
        too_big = program.n_ranks * len(program.steps(0)) > EVENT_STEP_LIMIT
        if exact or too_big or symmetric:
            return _estimate_symmetric(program, topology, compute_bandwidth, exact, group)
    if contention_free or (contention_free is None and symmetric is not False):
        cost = _estimate_contention_free(program, topology, hosts, compute_bandwidth)
        if cost is not None:
            return cost
        if contention_free:
            raise CollectiveError(
                f"the contention-free shortcut does not apply to {program!r} here"
            )
    return estimate_concurrent(
        [(program, 0.0, hosts)], topology, compute_bandwidth=compute_bandwidth
    )[0]


# -- the contention-free shortcut ----------------------------------------------------------


def _estimate_contention_free(
    program: Program, topology: Topology, hosts: list[int], compute_bw: float | None
) -> Cost | None:
    """The program priced by ``genie.collectives.contention_free`` (the same Cost the event
    simulation gives, bit for bit), or None where one of its obligations fails."""
    from genie.collectives import contention_free

    if not uniform_shards(program.spec):  # O1: rank r moves rank 0's bytes
        return None
    with gc_paused():
        got = contention_free.price(program, topology, hosts, compute_bw)
    if got is None:
        return None
    finish = got.rank_finish
    return Cost(
        time_s=float(finish.max()) - 0.0 if len(finish) else 0.0,
        link_bytes=got.link_bytes,
        intra_bytes=sum(got.intra.values()),
        messages=got.messages,
        bytes_sent=got.bytes_sent,
        steps=got.steps,
        method="contention-free",
        bottleneck_s=_bottleneck(topology, got.link_bytes, got.intra),
        start_s=0.0,
        rank_finish_s=[f - 0.0 for f in finish.tolist()],
    )


# -- the symmetric shortcut ----------------------------------------------------------------


def _symmetry_group(program: Program, topology: Topology, hosts: list[int]) -> str | None:
    """'rot' or 'xor' when the one-rank shortcut is exact for this program here, else None."""
    spec = program.spec
    n = spec.n_ranks
    kind = topology.symmetry
    if n < 2 or spec.options.get("oneway") or spec.splits or kind is None:
        return None  # (an uneven all-to-all: ranks differ, no rank stands for the others)
    if not _is_identity(hosts):
        return None
    pair = (spec.collective, spec.algorithm)
    if pair in ROTATION_SYMMETRIC:
        return None if kind == "ring" and n != topology.n_hosts else "rot"
    if pair in XOR_SYMMETRIC and n & (n - 1) == 0 and kind in ("star", "full"):
        return "xor"
    return None


def uniform_shards(spec) -> bool:
    """True when, in every chunk, all n shard pieces have the same size (ranks move equal bytes)."""
    if spec.collective in ("send_recv", "all_to_all"):
        return not spec.splits
    for c in range(spec.chunks):
        sizes = {nb for _, nb in chunk_segments(spec, c)}
        if len(sizes) > 1:
            return False
    return True


def _estimate_symmetric(
    program: Program, topology: Topology, compute_bw, exact: bool, group: str = "rot"
) -> Cost:
    n = program.n_ranks
    kind = topology.symmetry
    steps = program.steps(0)
    if group == "xor":  # rank r talks to r ^ s where rank 0 talks to s

        def shift(peer: int) -> int:
            return peer

        def target(r: int, s: int) -> int:
            return r ^ s

        recv_shift = shift
    else:  # rank r talks to r + s where rank 0 talks to s

        def shift(peer: int) -> int:
            return peer % n

        def target(r: int, s: int) -> int:
            return (r + s) % n

        def recv_shift(peer: int) -> int:  # rank p's send to 0 is rank 0's send to -p
            return (-peer) % n

    class_of: dict[int, tuple[tuple[object, float], ...]] = {}
    lat_of: dict[int, float] = {}
    cap_of: dict[object, float] = {}
    for s in {shift(st.peer) for st in steps if st.op == Op.SEND}:
        route = topology.route(0, s)
        bw = topology.route_bandwidth(route)
        key: object
        if kind == "star":
            key, w = "port", 1.0
        elif kind == "full":
            key, w = ("pair", s), 1.0
        else:  # ring: direction of the first hop; each flow loads every link it crosses
            key, w = ("dir", route[0] % 2), float(len(route))
        class_of[s] = ((key, w),)
        lat_of[s] = topology.route_latency(route)
        cap_of[key] = bw

    def route_of(_r: int, st: Step):
        s = shift(st.peer)
        return class_of[s], lat_of[s]

    wire = wire_fn(program.spec)
    inst = Instance(
        [steps],
        route_of,
        send_key=lambda _r, st, k: (shift(st.peer), st.tag, k),
        recv_key=lambda _r, st, k: (recv_shift(st.peer), st.tag, k),
        name=repr(program),
        wire=wire,
        channel=channel_fn(program.spec),
    )
    sim = FlowSim(lambda key: cap_of[key], compute_bw, step_overhead=topology.step_overhead)
    sim.add(inst)
    with gc_paused():
        sim.run()
    by_shift: dict[int, int] = {}
    for st in steps:
        if st.op == Op.SEND:
            s = shift(st.peer)
            by_shift[s] = by_shift.get(s, 0) + (st.nbytes if wire is None else wire(st.nbytes))
    link_bytes: dict[int, float] = {}  # integers: exact in any order
    if kind == "star" and by_shift:
        # every rank sends each shift's bytes once and, the shift being a bijection, receives
        # them once: each host's up and down link carry the sum (integers: exact in any order)
        total = sum(by_shift.values())
        for r in range(n):
            up, down = topology.route(r, (r + 1) % n)[0], topology.route((r + 1) % n, r)[-1]
            link_bytes[up] = link_bytes.get(up, 0) + total
            link_bytes[down] = link_bytes.get(down, 0) + total
    for s, b in by_shift.items() if kind != "star" else ():
        for r in range(n):
            for lid in topology.route(r, target(r, s)):
                link_bytes[lid] = link_bytes.get(lid, 0) + b
    t = max(inst.finish)
    return Cost(
        time_s=t,
        link_bytes=link_bytes,
        intra_bytes=0,
        messages=inst.messages * n,
        bytes_sent=inst.bytes_sent * n,
        steps=inst.total,
        method="symmetric" if exact else "symmetric-approx",
        bottleneck_s=_bottleneck(topology, link_bytes, {}),
        rank_finish_s=[],
    )


def nccl_size(program: Program) -> int:
    """The size nccl-tests would print for this program: its whole buffer."""
    return buffer_bytes(program.spec)
