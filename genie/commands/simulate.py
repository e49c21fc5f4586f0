"""``genie simulate``: replay a workload over one or more network backends and report.

Networks: ``analytical`` (fluid link sharing on the testbed's topology or a target topology)
and ``measured:RUN`` (per-collective times of a ``genie bench`` run, or a JSON file of rows),
side by side when several are given. Bandwidths print in GB/s = 10^9 B/s.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from rich.console import Console

from genie import progress
from genie.collectives.registry import parse_algorithms
from genie.commands import _args as A
from genie.commands import _astra, _calibration
from genie.commands._sim_output import (
    describe,
    dump_json,
    print_reports,
    trace_facts,
    trace_notes,
    with_closed,
)
from genie.errors import StoreError, UsageError
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.attribution import busiest_links
from genie.sim.measured import MeasuredBackend, MeasuredTable
from genie.sim.network import AnalyticalBackend
from genie.sim.report import SimReport, chrome_trace
from genie.sim.streams import describe as stream_rule
from genie.sim.streams import order_collectives
from genie.sim.traffic import TOPOLOGIES, NetModel
from genie.workload.et_codec import gc_paused

EXTRA_TOPOLOGIES = ("ring", "leaf_spine")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie simulate``."""
    p = sub.add_parser(
        "simulate",
        help="replay a Chakra workload over analytical / measured network backends",
        description=__doc__,
    )
    p.add_argument("workload", help="workload prefix (files PREFIX.<rank>.et) or its directory")
    p.add_argument("--testbed", help="testbed TOML: topology and rank placement")
    p.add_argument(
        "--topology",
        choices=[*TOPOLOGIES, *EXTRA_TOPOLOGIES],
        help="target topology when no testbed is given (default switch)",
    )
    p.add_argument(
        "--bandwidth",
        type=A.bandwidth,
        default="50GiB/s",
        help="link bandwidth: 50GiB/s (2^30 B/s, ASTRA-sim's 'GB/s'), 50GB/s (10^9 B/s), "
        "100Gb/s or 400gbit (bits)",
    )
    p.add_argument(
        "--latency",
        type=A.duration,
        default="500ns",
        help="latency per link (ASTRA-sim: hops x latency; a switch route has 2 hops)",
    )
    p.add_argument(
        "--ranks-per-host", type=A.integer(1, 4096), default=1, help="ranks placed on each host"
    )
    p.add_argument(
        "--intra-bandwidth", type=A.bandwidth, help="bandwidth between ranks of one host"
    )
    p.add_argument(
        "--intra-latency", type=A.duration, default="0", help="latency between ranks of one host"
    )
    p.add_argument("--leaves", type=A.integer(1, 1024), default=2, help="leaf_spine: leaf switches")
    p.add_argument(
        "--spines", type=A.integer(1, 1024), default=1, help="leaf_spine: spine switches"
    )
    p.add_argument("--oversubscription", type=A.ratio, default=1.0, help="leaf_spine uplinks")
    p.add_argument(
        "--routing",
        choices=("ecmp", "spray", "pinned"),
        help="how flows spread over equal-cost paths: ecmp (per-flow hash, the default), spray "
        "(ideal per-packet), pinned (one path per host pair, the old behaviour)",
    )
    p.add_argument(
        "--channels", type=A.integer(1, 1024), help="NCCL channels per rank pair (default 2)"
    )
    p.add_argument("--qps", type=A.integer(1, 1024), help="queue pairs per connection (default 1)")
    p.add_argument("--ecmp-seed", type=A.integer(0, 2**31), help="ECMP hash seed (default 0)")
    p.add_argument(
        "--network",
        default="analytical",
        help="comma list of backends: analytical, measured:RUN_ID or measured:FILE.json",
    )
    p.add_argument("--store", help="run store file (default: genie's)")
    _calibration.add_argument(p, "none")
    p.add_argument(
        "--pricer",
        choices=("programs", "builtin"),
        default="programs",
        help="analytical pricing: programs = step programs priced by genie.collectives.cost "
        "(default); builtin = the simulator's own traffic model (faster)",
    )
    p.add_argument(
        "--algorithm",
        help="algorithm for every collective offering it (ring, halvingDoubling, ...) or per "
        "collective: all_reduce=ring,all_to_all=direct",
    )
    p.add_argument(
        "--chunks", type=A.integer(1, 1024), default=1, help="chunks per collective (pipelining)"
    )
    p.add_argument(
        "--comm-concurrency",
        type=A.integer(0, 1024),
        default=1,
        help="collectives of one process group in flight at once on a rank, in issue order "
        "(1: NCCL's one stream per communicator; 0: no limit)",
    )
    p.add_argument("--compute", choices=("trace", "roofline"), default="trace")
    p.add_argument("--peak-flops", type=A.real(0, 1e20), help="roofline: peak FLOP/s (e.g. 989e12)")
    p.add_argument(
        "--efficiency", type=A.real(0, 1), default=1.0, help="roofline: fraction of peak"
    )
    p.add_argument(
        "--memory-bandwidth", type=A.bandwidth, help="roofline: memory bandwidth, e.g. 3.35TB/s"
    )
    p.add_argument(
        "--no-symmetry",
        action="store_true",
        help="replay every rank even when ranks are provably identical",
    )
    p.add_argument(
        "--no-sharing",
        action="store_true",
        help="measured: instances in flight together do not slow each other (default: they "
        "share links as the analytical model says, scaled to their measured times)",
    )
    p.add_argument("--trace", help="write a Chrome-trace/Perfetto JSON timeline here")
    p.add_argument(
        "--trace-ranks",
        type=A.integer(1, 131072),
        default=256,
        help="ranks written to the trace (first N)",
    )
    p.add_argument(
        "--rows", type=A.integer(0, 1000000), default=20, help="collective rows shown per backend"
    )
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    _astra.add_arguments(p)
    p.set_defaults(func=run)


def _routing(args: argparse.Namespace, base=None):
    """The routing of the command line over ``base`` (the testbed's, or the default)."""
    from msgspec.structs import replace

    from genie.collectives.topology import Routing

    r = base or Routing()
    changes = {
        k: v
        for k, v in (
            ("policy", args.routing),
            ("channels", args.channels),
            ("qps", args.qps),
            ("seed", args.ecmp_seed),
        )
        if v is not None
    }
    return replace(r, **changes) if changes else r


def _network_model(args: argparse.Namespace, n_ranks: int) -> tuple[Any, dict]:
    """The analytical pricer and what the closed form needs (or {} if not comparable)."""
    intra_bw = args.intra_bandwidth
    intra_lat = args.intra_latency
    k = args.ranks_per_host
    if k < 1:
        raise UsageError("--ranks-per-host must be at least 1")
    if args.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    from genie.collectives import topology as ctopo

    extra = {"intra_bandwidth": intra_bw, "intra_latency": intra_lat}
    extra["routing"] = _routing(args)
    if args.testbed:
        if args.topology:
            raise UsageError("give either --testbed or --topology, not both")
        from genie.testbed import load_testbed

        tb = load_testbed(args.testbed)
        topo = tb.to_topology().with_routing(_routing(args, tb.routing))
        placement = tb.rank_hosts()
        if k > 1 or len(placement) < n_ranks:
            k = max(k, math.ceil(n_ranks / max(1, len(tb.hosts))))
            placement = [min(r // k, len(tb.hosts) - 1) for r in range(n_ranks)]
            args.placement_note = (
                f"placement: {n_ranks} ranks, {k} per host on the testbed's {len(tb.hosts)} "
                "hosts (its rank slots do not cover the workload, or --ranks-per-host was given)"
            )
        placement = placement[:n_ranks]
    else:
        kind = args.topology or "switch"
        bw, lat = args.bandwidth, args.latency
        n_hosts = math.ceil(n_ranks / k)
        placement = [r // k for r in range(n_ranks)]
        if args.pricer == "builtin" and kind in TOPOLOGIES and args.calibration == "none":
            model = NetModel(n_ranks, bw, lat, kind, k, intra_bw, intra_lat)  # one path: no ECMP
            closed = {"bandwidth": bw, "latency": model.alpha, "algorithms": None}
            return model, closed if kind == "switch" and k == 1 else {}
        if kind == "switch":
            topo = ctopo.switch(n_hosts, bw, lat, **extra)
        elif kind == "fully_connected":
            topo = ctopo.fully_connected(max(2, n_hosts), bw, lat, **extra)
        elif kind == "ring":
            topo = ctopo.ring(max(2, n_hosts), bw, lat, **extra)
        else:
            per_leaf = math.ceil(n_hosts / args.leaves)
            topo = ctopo.leaf_spine(
                args.leaves, args.spines, per_leaf, bw, lat, args.oversubscription, **extra
            )
    topo = _calibration.apply(args, topo, tb.name if args.testbed else None)
    if args.pricer == "builtin":
        from genie.sim.traffic import TopologyPricer

        pricer: Any = TopologyPricer(topo, placement, n_ranks)
        algos: dict[str, str] | None = None
    else:
        from genie.sim.program_pricer import ProgramPricer

        algos = parse_algorithms(args.algorithm)
        pricer = ProgramPricer(topo, placement, n_ranks, algos, args.chunks)
    closed = {}
    one_per_host = len(set(placement)) == n_ranks
    if getattr(topo, "kind", "") == "star" and one_per_host and len(topo.hosts) > 1:
        route = topo.route(0, 1)
        closed = {
            "bandwidth": topo.route_bandwidth(route),
            "latency": topo.route_latency(route),
            "algorithms": algos,
            "chunks": args.chunks if algos is not None else 1,
        }
    return pricer, closed


def measured_table(source: str, store: str | None, algorithm: str | None) -> MeasuredTable:
    """The measured times of a ``genie bench`` run in the store, or of a JSON file of rows."""
    from pathlib import Path

    if source.endswith(".json") or Path(source).is_file():
        return MeasuredTable.from_json(source)
    from genie.store import DEFAULT_STORE, RunStore

    path = Path(store or DEFAULT_STORE)
    if not path.is_file():
        raise StoreError(f"no run store at {path} (run `genie bench` first, or pass --store)")
    with RunStore(path) as st:
        info = st.run(source)
        rows = st.instances(info.run_id)
    return MeasuredTable.from_instances(rows, f"run {info.run_id}", parse_algorithms(algorithm))


def _backends(args: argparse.Namespace, pricer: Any) -> list:
    out = []
    for spec in [s.strip() for s in args.network.split(",") if s.strip()]:
        if spec == "analytical":
            out.append(AnalyticalBackend(pricer, track_links=True))
        elif spec.startswith("measured:"):
            table = measured_table(spec.split(":", 1)[1], args.store, args.algorithm)
            alone = AnalyticalBackend(pricer)
            share = None if args.no_sharing else pricer
            out.append(MeasuredBackend(table, model=alone.alone, name=spec, pricer=share))
        elif spec in ("testbed", "emulate"):
            raise UsageError(
                "the testbed backend runs through `genie emulate WORKLOAD --testbed F`"
            )
        else:
            raise UsageError(f"unknown network backend {spec!r} (analytical, measured:RUN_ID)")
    if not out:
        raise UsageError("--network names no backend")
    return out


def run(args: argparse.Namespace) -> int:
    """Handle ``genie simulate``."""
    err = Console(stderr=True)
    net, system = _astra.load_configs(args)
    astra_notes: list[str] = []
    if net is not None and system is not None and args.model == "genie":
        astra_notes = _astra.as_genie_model(args, net, system)
    compute = ComputeModel(
        mode=args.compute,
        peak_flops=args.peak_flops,
        efficiency=args.efficiency,
        memory_bandwidth=args.memory_bandwidth,
    )
    if args.compute == "roofline" and not (args.peak_flops or args.memory_bandwidth):
        raise UsageError("--compute roofline needs --peak-flops and/or --memory-bandwidth")
    if system is not None and system.roofline:
        compute = system.compute_model()  # ASTRA-sim's roofline-enabled
    # the cyclic collector would walk the workload's millions of objects again and again while
    # nothing here makes garbage cycles (a quarter of the time at 4,096 ranks): paused
    with gc_paused(), progress.stage("loading workload") as status:
        wl = load_workload(args.workload)
        _astra.apply_comm_groups(args, wl)
        status.describe(f"compiling {wl.n_ranks} ranks")
        cw = compile_workload(wl, compute)
        if args.model == "genie":
            cw = order_collectives(cw, args.comm_concurrency)
            pricer, closed = _network_model(args, cw.n_ranks)
            backends = _backends(args, pricer)
        else:
            pricer = _astra.astra_backend(args, wl, cw, net, system)
            closed, backends = {}, [pricer]
        facts = trace_facts(wl, cw)
        reports: list[SimReport] = []
        raws = []
        for be in backends:
            status.describe(f"replaying {cw.n_nodes} nodes over {be.name}")
            rep, raw = replay(cw, be, symmetry=not args.no_symmetry)
            rep.links = busiest_links(be, rep.iteration_s)
            if isinstance(be, MeasuredBackend) or args.model != "genie":
                rep.notes.append(be.summary())
            rep.notes.extend(astra_notes)
            if getattr(args, "placement_note", None):
                rep.notes.append(args.placement_note)
            rep.notes += trace_notes(facts)
            if args.model == "genie":
                rep.notes.append(f"stream order: {stream_rule(args.comm_concurrency)}")
            fallbacks = getattr(pricer, "fallbacks", None)
            if fallbacks:
                rep.notes.append(
                    "priced by the built-in traffic model (no program or the cost model "
                    f"declined): {dict(sorted(fallbacks.items()))}"
                )
            reports.append(rep)
            raws.append(raw)
    if args.trace:
        with progress.stage(f"writing the timeline to {args.trace}"):
            n = chrome_trace(cw, raws[0], args.trace, max_ranks=args.trace_ranks)
        left = cw.n_ranks - min(cw.n_ranks, args.trace_ranks)
        more = f"; {left} ranks left out (--trace-ranks)" if left > 0 else ""
        err.print(f"trace: {n} events ({reports[0].backend}) written to {args.trace}{more}")
    network = describe(pricer)
    if args.json:
        dump_json(
            {
                "workload": cw.name,
                "network": network,
                "trace": facts,
                "reports": [with_closed(r.to_dict(), closed) for r in reports],
            }
        )
        return 0
    con = Console(width=None if sys.stdout.isatty() else 120)
    print_reports(con, cw, network, reports, closed, args.rows)
    return 0
