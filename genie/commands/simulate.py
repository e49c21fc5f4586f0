"""``genie simulate``: replay a workload over one or more network backends and report.

Networks: ``analytical`` (fluid link sharing on the testbed's topology or a target topology)
and ``measured:RUN`` (per-collective times of a ``genie bench`` run, or a JSON file of rows),
side by side when several are given. Bandwidths print in GB/s = 10^9 B/s.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from genie import progress
from genie.collectives.registry import parse_algorithms
from genie.commands import _args as A
from genie.commands import _astra, _calibration
from genie.commands import _experiments as X
from genie.commands._sim_output import (
    describe,
    dump_json,
    print_reports,
    trace_facts,
    trace_notes,
    with_closed,
)
from genie.errors import StoreError, UsageError
from genie.sim import perturb
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.compiled import CompiledWorkload
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
    p.add_argument(
        "workload",
        nargs="+",
        help="workload prefix (files PREFIX.<rank>.et) or its directory; several: several jobs "
        "on one fabric (--job-hosts, --job-start)",
    )
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
    A.add_comm_concurrency(p)
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
    p.add_argument(
        "--placement",
        choices=("packed", "round-robin"),
        default="packed",
        help="ranks to hosts with --ranks-per-host > 1: packed (consecutive ranks share a "
        "host, the default) or round-robin (rank r on host r mod hosts)",
    )
    X.add_job_arguments(p)
    X.add_perturb_arguments(p)
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


def _placement(args: argparse.Namespace, n_ranks: int, n_hosts: int, k: int) -> list[int]:
    """Host of each rank: packed (k consecutive ranks to a host) or round-robin over hosts."""
    if getattr(args, "placement", "packed") == "round-robin":
        return [r % n_hosts for r in range(n_ranks)]
    return [min(r // k, n_hosts - 1) for r in range(n_ranks)]


def fabric(
    args: argparse.Namespace, n_ranks: int, placement: list[int] | None = None
) -> tuple[Any, list[int]]:
    """The topology the command line describes and the host of each rank on it.

    ``placement`` (host indices, e.g. several jobs') is kept; the fabric then has enough hosts
    for it. Without one, ranks go ``--ranks-per-host`` to a host (``--placement``).
    """
    k = args.ranks_per_host
    if k < 1:
        raise UsageError("--ranks-per-host must be at least 1")
    if args.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    from genie.collectives import topology as ctopo

    extra = {
        "intra_bandwidth": args.intra_bandwidth,
        "intra_latency": args.intra_latency,
        "routing": _routing(args),
    }
    if args.testbed:
        if args.topology:
            raise UsageError("give either --testbed or --topology, not both")
        from genie.testbed import load_testbed

        tb = load_testbed(args.testbed)
        topo = tb.to_topology().with_routing(_routing(args, tb.routing))
        if placement is not None:
            if max(placement, default=0) >= len(tb.hosts):
                raise UsageError(
                    f"host {max(placement)} named, but testbed {tb.name} has {len(tb.hosts)} "
                    f"hosts (0..{len(tb.hosts) - 1})"
                )
        else:
            placement = tb.rank_hosts()
            if k > 1 or len(placement) < n_ranks:
                k = max(k, math.ceil(n_ranks / max(1, len(tb.hosts))))
                placement = _placement(args, n_ranks, len(tb.hosts), k)
                args.placement_note = (
                    f"placement: {n_ranks} ranks, {k} per host on the testbed's "
                    f"{len(tb.hosts)} hosts (its rank slots do not cover the workload, or "
                    "--ranks-per-host was given)"
                )
            placement = placement[:n_ranks]
        topo = _calibration.apply(args, topo, tb.name)
        return topo, placement
    kind = args.topology or "switch"
    bw, lat = args.bandwidth, args.latency
    if placement is None:
        n_hosts = math.ceil(n_ranks / k)
        placement = _placement(args, n_ranks, n_hosts, k)
    else:
        n_hosts = max(placement, default=0) + 1
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
    return _calibration.apply(args, topo, None), placement


def make_pricer(args: argparse.Namespace, topo: Any, placement: list[int], n_ranks: int) -> Any:
    """The analytical pricer of ``--pricer`` on ``topo`` with ``placement``."""
    if args.pricer == "builtin":
        from genie.sim.traffic import TopologyPricer

        return TopologyPricer(topo, placement, n_ranks)
    from genie.sim.program_pricer import ProgramPricer

    return ProgramPricer(topo, placement, n_ranks, parse_algorithms(args.algorithm), args.chunks)


def _network_model(args: argparse.Namespace, n_ranks: int) -> tuple[Any, dict]:
    """The analytical pricer and what the closed form needs (or {} if not comparable)."""
    kind = args.topology or "switch"
    k = args.ranks_per_host
    builtin_star = args.pricer == "builtin" and kind in TOPOLOGIES and args.calibration == "none"
    if not args.testbed and builtin_star and getattr(args, "placement", "packed") == "packed":
        if k < 1:
            raise UsageError("--ranks-per-host must be at least 1")
        bw, lat = args.bandwidth, args.latency
        model = NetModel(
            n_ranks, bw, lat, kind, k, args.intra_bandwidth, args.intra_latency
        )  # one path: no ECMP
        closed = {"bandwidth": bw, "latency": model.alpha, "algorithms": None}
        return model, closed if kind == "switch" and k == 1 else {}
    topo, placement = fabric(args, n_ranks)
    pricer = make_pricer(args, topo, placement, n_ranks)
    algos = None if args.pricer == "builtin" else parse_algorithms(args.algorithm)
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


def _backend_specs(args: argparse.Namespace) -> list[str]:
    """The backends ``--network`` names (checked)."""
    out = []
    for spec in [s.strip() for s in args.network.split(",") if s.strip()]:
        if spec in ("testbed", "emulate"):
            raise UsageError(
                "the testbed backend runs through `genie emulate WORKLOAD --testbed F`"
            )
        if spec != "analytical" and not spec.startswith("measured:"):
            raise UsageError(f"unknown network backend {spec!r} (analytical, measured:RUN_ID)")
        out.append(spec)
    if not out:
        raise UsageError("--network names no backend")
    return out


_TABLES: dict[tuple, MeasuredTable] = {}


def _backend(args: argparse.Namespace, pricer: Any, spec: str) -> Any:
    """A fresh backend of kind ``spec`` over ``pricer`` (measured tables read once)."""
    if spec == "analytical":
        return AnalyticalBackend(pricer, track_links=True)
    key = (spec, args.store, args.algorithm)
    if key not in _TABLES:
        _TABLES[key] = measured_table(spec.split(":", 1)[1], args.store, args.algorithm)
    alone = AnalyticalBackend(pricer)
    share = None if args.no_sharing else pricer
    return MeasuredBackend(_TABLES[key], model=alone.alone, name=spec, pricer=share)


@dataclass
class Simulated:
    """What one ``genie simulate`` computed: reports per backend, and what printing needs."""

    cw: CompiledWorkload
    network: str
    reports: list[SimReport]
    closed: dict
    facts: dict
    raws: list = field(default_factory=list)
    jobs: dict | None = None  # several jobs: genie.commands._jobs.jobs_doc

    def doc(self) -> dict:
        """The ``--json`` document."""
        out = {
            "workload": self.cw.name,
            "network": self.network,
            "trace": self.facts,
            "reports": [with_closed(r.to_dict(), self.closed) for r in self.reports],
        }
        if self.jobs is not None:
            out["jobs"] = self.jobs
        return out


def _compute_model(args: argparse.Namespace, system) -> ComputeModel:
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
    return compute


def simulate(args: argparse.Namespace) -> Simulated:
    """Run what the command line asks (no printing): one workload, or several jobs."""
    net, system = _astra.load_configs(args)
    astra_notes: list[str] = []
    if net is not None and system is not None and args.model == "genie":
        astra_notes = _astra.as_genie_model(args, net, system)
    compute = _compute_model(args, system)
    pert = X.perturbation(args)
    if X.wants_jobs(args):
        if args.model != "genie":
            raise UsageError("several jobs run on genie's model (--model genie)")
        from genie.commands._jobs import run_jobs

        with gc_paused():
            return run_jobs(args, compute, pert)
    # the cyclic collector would walk the workload's millions of objects again and again while
    # nothing here makes garbage cycles (a quarter of the time at 4,096 ranks): paused
    with gc_paused(), progress.stage("loading workload") as status:
        wl = load_workload(args.workload[0])
        _astra.apply_comm_groups(args, wl)
        status.describe(f"compiling {wl.n_ranks} ranks")
        base = compile_workload(wl, compute)
        if args.model == "genie":
            base = order_collectives(base, args.comm_concurrency)
        cw = perturb.apply(base, pert)
        if args.model == "genie":
            pricer, closed = _network_model(args, cw.n_ranks)
            pricer.use_splits(cw.instances.splits)  # all-to-all-v priced by its matrix
            makers = [
                lambda spec=spec: _backend(args, pricer, spec) for spec in _backend_specs(args)
            ]
        else:
            pricer = _astra.astra_backend(args, wl, cw, net, system)
            closed, built = {}, [pricer]
            makers = [
                lambda: built.pop() if built else _astra.astra_backend(args, wl, base, net, system)
            ]
        facts = trace_facts(wl, cw)
        reports: list[SimReport] = []
        raws = []
        for make in makers:
            status.describe(f"replaying {cw.n_nodes} nodes")
            be = make()
            rep, raw = X.replay_perturbed(cw, base, be, make, pert, not args.no_symmetry)
            if isinstance(be, MeasuredBackend) or args.model != "genie":
                rep.notes.append(be.summary())
            rep.notes.extend(astra_notes)
            if getattr(args, "placement_note", None):
                rep.notes.append(args.placement_note)
            rep.notes += trace_notes(facts)
            if args.model == "genie":
                rep.notes.append(f"stream order: {stream_rule(args.comm_concurrency)}")
            if pert:
                rep.notes.append(f"stragglers/jitter: {pert.describe()}")
            fallbacks = getattr(pricer, "fallbacks", None)
            if fallbacks:
                rep.notes.append(
                    "priced by the built-in traffic model (no program or the cost model "
                    f"declined): {dict(sorted(fallbacks.items()))}"
                )
            reports.append(rep)
            raws.append(raw)
    return Simulated(cw, describe(pricer), reports, closed, facts, raws)


def run(args: argparse.Namespace) -> int:
    """Handle ``genie simulate``."""
    err = Console(stderr=True)
    sim = simulate(args)
    if args.trace:
        with progress.stage(f"writing the timeline to {args.trace}"):
            n = chrome_trace(sim.cw, sim.raws[0], args.trace, max_ranks=args.trace_ranks)
        left = sim.cw.n_ranks - min(sim.cw.n_ranks, args.trace_ranks)
        more = f"; {left} ranks left out (--trace-ranks)" if left > 0 else ""
        err.print(f"trace: {n} events ({sim.reports[0].backend}) written to {args.trace}{more}")
    if args.json:
        dump_json(sim.doc())
        return 0
    con = Console(width=None if sys.stdout.isatty() else 120)
    if sim.jobs is not None:
        from genie.commands._jobs import print_jobs

        print_jobs(con, sim.jobs)
    print_reports(con, sim.cw, sim.network, sim.reports, sim.closed, args.rows)
    return 0
