"""``genie simulate``: replay a workload over one or more network backends and report.

Networks: ``analytical`` (fluid link sharing on the testbed's topology or a target topology)
and ``measured:RUN`` (per-collective times of a ``genie bench`` run, or a JSON file of rows),
side by side when several are given. Bandwidths print in GB/s = 10^9 B/s.
"""

from __future__ import annotations

import argparse
import sys

from genie import progress
from genie.api.simulation import Simulation, simulate
from genie.api.specs import TOPOLOGIES, Compute, Fabric, Model, SimulateSpec
from genie.collectives.gpu_presets import PRESETS
from genie.commands import _args as A
from genie.commands import _astra, _calibration
from genie.commands import _experiments as X
from genie.placement import MODES as PLACEMENTS
from genie.units import format_seconds


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
        choices=TOPOLOGIES,
        help="target topology when no testbed is given (default switch)",
    )
    p.add_argument(
        "--bandwidth",
        type=A.bandwidth,
        default=Fabric().bandwidth,
        help=f"link bandwidth (default {Fabric().bandwidth}: genie's default link, as genie "
        "collective show's): 50GiB/s (2^30 B/s, ASTRA-sim's 'GB/s'), 50GB/s (10^9 B/s), "
        "100Gb/s or 400gbit (bits)",
    )
    p.add_argument(
        "--latency",
        type=A.duration,
        default=Fabric().latency,
        help=f"latency per link (default {Fabric().latency}; ASTRA-sim: hops x latency; a "
        "switch route has 2 hops)",
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
        "--headers",
        choices=("none", "tcp", "tcp6", "rocev2"),
        default="none",
        help="--topology's links carry this stack's packets: the model prices the payload after "
        "their headers (and Ethernet's preamble and gap) at --mtu; none (default): the "
        "bandwidth as given (a testbed file's transport and MTU decide for it)",
    )
    p.add_argument(
        "--mtu", type=A.integer(576, 65536), default=1500, help="with --headers: bytes per packet"
    )
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
        "--collective-model",
        choices=("nccl", "line-rate"),
        default="auto",
        help="how a collective takes time: nccl (NCCL's algorithm and protocol choice, "
        "latencies and protocol limits; prints what it chose per collective; the default) or "
        "line-rate (genie's step programs at the links' rates; the default where --algorithm, "
        "--pricer builtin or an ASTRA-sim --model is given)",
    )
    p.add_argument(
        "--gpu",
        choices=tuple(PRESETS),
        help="GPU server preset: its NCCL constants, PCIe to the NICs and, unless "
        "--intra-bandwidth, its intra-node bus",
    )
    p.add_argument("--nccl-algo", help="nccl model: as NCCL_ALGO (ring, tree, ^tree)")
    p.add_argument("--nccl-proto", help="nccl model: as NCCL_PROTO (LL, LL128, Simple, ^LL128)")
    p.add_argument(
        "--nccl-version", help="nccl model: NCCL release of the tuner constants (2.21.5)"
    )
    A.add_comm_concurrency(p)
    A.add_trace_edges(p)
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
        choices=PLACEMENTS,
        help="ranks to hosts: testbed (the testbed's rank slots; the default with --testbed), "
        "packed (--ranks-per-host consecutive ranks share a host; the default otherwise) or "
        "round-robin (rank r on host r mod hosts)",
    )
    X.add_job_arguments(p)
    X.add_perturb_arguments(p)
    _astra.add_arguments(p)
    p.set_defaults(func=run)


def spec_from_args(args: argparse.Namespace) -> SimulateSpec:
    """The ``SimulateSpec`` of ``genie simulate``'s command line."""
    fabric = Fabric(
        testbed=args.testbed,
        topology=args.topology,
        bandwidth=args.bandwidth,
        latency=args.latency,
        ranks_per_host=args.ranks_per_host,
        placement=args.placement,
        intra_bandwidth=args.intra_bandwidth,
        intra_latency=args.intra_latency,
        leaves=args.leaves,
        spines=args.spines,
        oversubscription=args.oversubscription,
        routing=args.routing,
        channels=args.channels,
        qps=args.qps,
        ecmp_seed=args.ecmp_seed,
        headers=args.headers,
        mtu=args.mtu,
        calibration=args.calibration,
    )
    model = Model(
        kind=args.model,
        pricer=args.pricer,
        algorithm=args.algorithm,
        chunks=args.chunks,
        comm_concurrency=args.comm_concurrency,
        astra_network=args.astra_network,
        astra_system=args.astra_system,
        comm_group=args.comm_group,
        collective_model=args.collective_model,
        gpu=args.gpu,
        nccl_algo=args.nccl_algo,
        nccl_proto=args.nccl_proto,
        nccl_version=args.nccl_version,
        trace_edges=args.trace_edges,
    )
    compute = Compute(
        mode=args.compute,
        peak_flops=args.peak_flops,
        efficiency=args.efficiency,
        memory_bandwidth=args.memory_bandwidth,
    )
    jobs = X.jobs_spec(args)
    return SimulateSpec(
        workload="" if jobs else args.workload[0],
        jobs=jobs,
        fabric=fabric,
        model=model,
        compute=compute,
        perturb=X.perturb_spec(args),
        network=tuple(s.strip() for s in args.network.split(",")),
        symmetry=not args.no_symmetry,
        sharing=not args.no_sharing,
        store=args.store,
    )


def render(sim: Simulation, rows: int = 20) -> None:
    """Print a simulation's tables on stdout (120 columns when not a terminal)."""
    # the tables' modules (and rich) load here: ``--json`` does not need them (start-up)
    from rich.console import Console

    from genie.commands._nccl_output import print_choices
    from genie.commands._sim_output import print_reports

    # names from the trace print as written (no ``:name:`` emoji codes); off a terminal, where
    # no colours are written, no highlighting is worked out either (a tenth of the tables' time)
    tty = sys.stdout.isatty()
    con = Console(width=None if tty else 120, emoji=False, highlight=tty)
    if sim.jobs is not None:
        from genie.commands._jobs import print_jobs

        print_jobs(con, sim.jobs)
    print_reports(con, sim.workload, sim.network, sim.reports, sim.closed, rows)
    if sim.nccl_choices is not None:
        print_choices(con, sim.nccl_choices, rows)
    if sim.line_rate is not None:
        lr = sim.line_rate
        it, other = sim.iteration_s, float(lr["iteration_s"])  # type: ignore[arg-type]
        con.print(
            f"line-rate model on the same fabric (--collective-model line-rate): iteration "
            f"{format_seconds(other)}; the NCCL-like model's {format_seconds(it)} is "
            f"{it / other:.2f}x it"
            if other > 0
            else "line-rate model: iteration 0 s"
        )


def run(args: argparse.Namespace) -> int:
    """Handle ``genie simulate``: parse -> spec -> ``genie.api.simulate`` -> render."""
    sim = simulate(spec_from_args(args))
    if args.trace:
        with progress.stage(f"writing the timeline to {args.trace}"):
            n = sim.write_trace(args.trace, args.trace_ranks)
        left = sim.workload.n_ranks - min(sim.workload.n_ranks, args.trace_ranks)
        more = f"; {left} ranks left out (--trace-ranks)" if left > 0 else ""
        from rich.console import Console

        Console(stderr=True).print(
            f"trace: {n} events ({sim.reports[0].backend}) written to {args.trace}{more}"
        )
    if args.json:
        from genie.commands._sim_output import dump_json

        dump_json(sim.to_dict())
        return 0
    render(sim, args.rows)
    return 0
