"""From a ``Fabric`` and a ``Model`` to what prices a workload: topology, placement, pricer.

``build`` makes the topology a fabric spec describes (a testbed file's, or a target topology
from numbers) with the rank placement on it (``genie.placement``) and, when asked, a stored
calibration applied. ``pricer`` is the analytical pricer of the model on it; ``network_model``
adds the textbook closed form's parameters where the network is one the closed forms describe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from genie.api.specs import Fabric, Model, bandwidth, ratio, seconds
from genie.calibration.model import calibrate_topology
from genie.calibration.stored import resolve
from genie.collectives import nccl_model
from genie.collectives import topology as ctopo
from genie.collectives.registry import parse_algorithms
from genie.errors import UsageError
from genie.placement import Placement, place
from genie.sim.closed import ClosedForm
from genie.sim.program_pricer import ProgramPricer
from genie.sim.traffic import TOPOLOGIES as BUILTIN_TOPOLOGIES
from genie.sim.traffic import NetModel, TopologyPricer

Pricer = TopologyPricer | ProgramPricer


@dataclass(frozen=True)
class Built:
    """A fabric as the model sees it: its topology, where each rank runs, what was decided."""

    topology: ctopo.Topology
    placement: Placement
    notes: tuple[str, ...] = ()

    @property
    def hosts(self) -> list[int]:
        """The topology host of every rank."""
        return list(self.placement.hosts)


def routing(fabric: Fabric, base: ctopo.Routing | None = None) -> ctopo.Routing:
    """The routing ``fabric`` asks for over ``base`` (the testbed's, or the default)."""
    r = base or ctopo.Routing()
    changes: dict[str, str | int] = {
        k: v
        for k, v in (
            ("policy", fabric.routing),
            ("channels", fabric.channels),
            ("qps", fabric.qps),
            ("seed", fabric.ecmp_seed),
        )
        if v is not None
    }
    return msgspec.structs.replace(r, **changes) if changes else r


def build(
    fabric: Fabric,
    n_ranks: int,
    hosts: Sequence[int] | None = None,
    *,
    store: str | Path | None = None,
) -> Built:
    """The topology ``fabric`` describes and the host of each of ``n_ranks`` ranks on it.

    ``hosts`` (host indices, e.g. several jobs') is kept; the fabric then has enough hosts for
    it. Without it, ranks go by ``fabric.placement``.
    """
    k = fabric.ranks_per_host
    if k < 1:
        raise UsageError("--ranks-per-host must be at least 1")
    intra_bw = bandwidth(fabric.intra_bandwidth) if fabric.intra_bandwidth is not None else None
    intra_lat = seconds(fabric.intra_latency)
    if fabric.testbed:
        if fabric.topology:
            raise UsageError("give either --testbed or --topology, not both")
        from genie.testbed import load_testbed

        if fabric.headers != "none":
            raise UsageError(
                "--headers prices a --topology; a testbed's transport and MTU set its headers"
            )
        tb = load_testbed(fabric.testbed)
        topo = tb.to_topology().with_routing(routing(fabric, tb.routing))
        notes: tuple[str, ...] = ()
        if hosts is not None:
            if max(hosts, default=0) >= len(tb.hosts):
                raise UsageError(
                    f"host {max(hosts)} named, but testbed {tb.name} has {len(tb.hosts)} "
                    f"hosts (0..{len(tb.hosts) - 1})"
                )
            placed = Placement(tuple(hosts), "jobs")
        else:
            p = tb.place(n_ranks, fabric.placement or "testbed", k)
            placed = Placement(tuple(tb.rank_hosts(tb.rank_host_names(p))), p.mode, p.note)
            notes = (p.note,) if p.note else ()
        topo, cal_note = _calibrated(fabric, topo, tb.name, store)
        return Built(topo, placed, (*notes, cal_note))
    kind = fabric.topology or "switch"
    bw, lat = bandwidth(fabric.bandwidth), seconds(fabric.latency)
    bw, wire = _payload(fabric, bw)
    if hosts is None:
        placed = place(n_ranks, fabric.placement or "packed", ranks_per_host=k)
    else:
        placed = Placement(tuple(hosts), "jobs")
    n_hosts = placed.n_hosts
    rt = routing(fabric)
    if kind == "switch":
        topo = ctopo.switch(
            n_hosts, bw, lat, intra_bandwidth=intra_bw, intra_latency=intra_lat, routing=rt
        )
    elif kind == "fully_connected":
        topo = ctopo.fully_connected(
            max(2, n_hosts), bw, lat, intra_bandwidth=intra_bw, intra_latency=intra_lat, routing=rt
        )
    elif kind == "ring":
        topo = ctopo.ring(
            max(2, n_hosts), bw, lat, intra_bandwidth=intra_bw, intra_latency=intra_lat, routing=rt
        )
    else:
        per_leaf = math.ceil(n_hosts / fabric.leaves)
        over = ratio(fabric.oversubscription)
        topo = ctopo.leaf_spine(
            fabric.leaves,
            fabric.spines,
            per_leaf,
            bw,
            lat,
            over,
            intra_bandwidth=intra_bw,
            intra_latency=intra_lat,
            routing=rt,
        )
    notes = (wire, placed.note) if placed.note else (wire,)
    topo, cal_note = _calibrated(fabric, topo, None, store)
    return Built(topo, placed, (*notes, cal_note))


def _payload(fabric: Fabric, bw: float) -> tuple[float, str]:
    """The rate the model gives a target topology's links, and one note saying what it is."""
    if fabric.headers == "none":
        return bw, "link rates as given: no packet headers taken off (--headers tcp|tcp6|rocev2)"
    # here, below the default: the testbed package is a quarter of a small simulate's imports
    from genie.testbed.to_topology import payload_fraction, wire_phrase

    if not 576 <= fabric.mtu <= 65536:
        raise UsageError(f"--mtu {fabric.mtu}: from 576 to 65536 bytes")
    frac = payload_fraction(fabric.headers, fabric.mtu, "static")
    return bw * frac, wire_phrase(fabric.headers, [fabric.mtu], "static")


def _calibrated(
    fabric: Fabric, topo: ctopo.Topology, testbed: str | None, store: str | Path | None
) -> tuple[ctopo.Topology, str]:
    """``topo`` priced with the calibration ``fabric.calibration`` names (unchanged: none),
    and a note saying which priced it or why none did."""
    from genie.calibration.model import nominal_reason

    cal = resolve(fabric.calibration, store, testbed, topo)
    if cal is None:
        return topo, nominal_reason(fabric.calibration)
    fitted = ", ".join(cal.runs) or "its runs"
    return calibrate_topology(topo, cal), f"calibrated model: {cal.cal_id} (fit on {fitted})"


def with_gpu(fabric: Fabric, model: Model) -> Fabric:
    """``fabric`` with ``model.gpu``'s intra-node bus where the fabric gives no intra rate."""
    if model.gpu is None or fabric.intra_bandwidth is not None:
        return fabric
    from genie.collectives.gpu_presets import preset

    return fabric.replace(intra_bandwidth=preset(model.gpu).intra_bw)


def resolve_collective_model(model: Model) -> Model:
    """``model`` with ``auto`` decided as ``simulate`` decides it: the NCCL-like model, unless
    a forced algorithm, the builtin pricer or an ASTRA-sim model wants the line-rate one."""
    if model.collective_model != "auto":
        return model
    line = model.algorithm or model.pricer == "builtin" or model.kind != "genie"
    return model.replace(collective_model="line-rate" if line else "nccl")


def check_collective_model(model: Model) -> None:
    """Refuse options that the chosen collective model does not take (one line)."""
    if model.collective_model != "nccl":
        if model.nccl_algo or model.nccl_proto or model.nccl_version:
            raise UsageError(
                "--nccl-algo, --nccl-proto and --nccl-version need --collective-model nccl"
            )
        return
    if model.pricer == "builtin":
        raise UsageError("--collective-model nccl prices step programs: not with --pricer builtin")
    if model.algorithm:
        raise UsageError("--collective-model nccl chooses algorithms: force one with --nccl-algo")


def nccl_system(model: Model) -> nccl_model.System:
    """The NCCL-like model's hardware facts (rates come from the topology, group by group)."""
    if model.gpu:
        return nccl_model.system_from_preset(model.gpu, nccl_release=model.nccl_version)
    return nccl_model.System(
        nodes=1, gpus_per_node=1, intra_bw=1.0, net_bw=1.0, nccl_release=model.nccl_version
    )


def pricer(model: Model, built: Built, n_ranks: int, hosts: Sequence[int] | None = None) -> Pricer:
    """The analytical pricer of ``model`` on ``built`` (``hosts``: another placement on it)."""
    if model.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    where = list(hosts) if hosts is not None else built.hosts
    check_collective_model(model)
    if model.collective_model == "nccl":
        from genie.sim.nccl_pricer import NcclPricer

        system = nccl_system(model)
        return NcclPricer(
            built.topology,
            where,
            n_ranks,
            system,
            model.nccl_algo,
            model.nccl_proto,
            model.chunks,
            preset=model.gpu,
        )
    if model.pricer == "builtin":
        return TopologyPricer(built.topology, where, n_ranks)
    algos = parse_algorithms(model.algorithm)
    return ProgramPricer(built.topology, where, n_ranks, algos, model.chunks)


def network_model(
    fabric: Fabric, model: Model, n_ranks: int, *, store: str | Path | None = None
) -> tuple[Pricer, ClosedForm | None, tuple[str, ...]]:
    """The analytical pricer, the closed form's network (None: not comparable), and notes."""
    check_collective_model(model)
    kind = fabric.topology or "switch"
    k = fabric.ranks_per_host
    builtin_star = (
        model.pricer == "builtin" and kind in BUILTIN_TOPOLOGIES and fabric.calibration == "none"
    )
    packed = (fabric.placement or "packed") == "packed"
    if not fabric.testbed and builtin_star and packed:
        if k < 1:
            raise UsageError("--ranks-per-host must be at least 1")
        bw, lat = bandwidth(fabric.bandwidth), seconds(fabric.latency)
        intra_bw = bandwidth(fabric.intra_bandwidth) if fabric.intra_bandwidth is not None else None
        net = NetModel(n_ranks, bw, lat, kind, k, intra_bw, seconds(fabric.intra_latency))
        closed = ClosedForm(bw, net.alpha, None) if kind == "switch" and k == 1 else None
        return net, closed, ()
    built = build(fabric, n_ranks, store=store)
    p = pricer(model, built, n_ranks)
    algos = None if model.pricer == "builtin" else parse_algorithms(model.algorithm)
    closed = None
    topo = built.topology
    if topo.kind == "star" and built.placement.one_per_host() and len(topo.hosts) > 1:
        route = topo.route(0, 1)
        closed = ClosedForm(
            topo.route_bandwidth(route),
            topo.route_latency(route),
            algos,
            model.chunks if algos is not None else 1,
        )
    return p, closed, built.notes
