"""``genie emulate``: hardware in the loop (``genie.api.emulate``; see ``genie.live``).

``--mode overlapped`` (the default) runs the whole trace's communication on the agents with the
compute gaps honoured, so collectives that overlap in the trace overlap on the wire; ``--mode
isolated`` measures each distinct collective alone. Either way the run goes through
``StoredRun``: stored with host facts and clock offsets, finished with its reason on any error.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from genie.api.emulation import Emulation, emulate
from genie.api.specs import EmulateSpec
from genie.commands import _args as A
from genie.commands import _experiments as X
from genie.commands import _tcp_cc as cc
from genie.commands._calibration import add_argument as add_calibration_argument
from genie.commands._calibration import add_dilation_argument
from genie.commands._emulate_output import print_isolated, print_overlapped, print_wire_jobs
from genie.commands._faults import add_argument as add_faults_argument
from genie.commands._sim_output import dump_json
from genie.errors import UsageError
from genie.live.isolated import Isolated
from genie.live.overlapped import Overlapped
from genie.placement import MODES as PLACEMENTS
from genie.store import DEFAULT_STORE


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie emulate`` (hardware in the loop; see genie.live)."""
    p = sub.add_parser(
        "emulate",
        help="run a workload's communication on the testbed's agents and replay it",
        description="Hardware in the loop. overlapped (default): every rank's compiled op list "
        "(its collectives with the compute gaps between them) runs on the live agents, all "
        "starting together, so collectives in flight together share the wire; each instance "
        "then takes its measured time in the replay. isolated: each distinct (collective, "
        "size, group) runs alone. Beside the analytical model; results go to the run store.",
    )
    p.add_argument(
        "--mode",
        choices=("overlapped", "isolated"),
        default="overlapped",
        help="overlapped: the whole trace on the wire with compute gaps (default); "
        "isolated: each distinct collective alone",
    )
    p.add_argument(
        "workload",
        nargs="+",
        help="workload prefix (files PREFIX.<rank>.et) or its directory; several: several jobs "
        "on one fabric, run together with one Go (--job-hosts, --job-start)",
    )
    p.add_argument("--testbed", required=True, help="testbed TOML with running agents")
    p.add_argument(
        "--iterations",
        type=A.integer(1, 1000000),
        default=5,
        help="measured runs (of each collective / the trace)",
    )
    p.add_argument("--warmup", type=A.integer(0, 100000), default=2, help="warm-up runs")
    p.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="testbed",
        help="ranks to agents: testbed (its rank slots, hosts in order), packed "
        "(--ranks-per-host consecutive ranks to an agent) or round-robin (rank r on host r mod "
        "hosts)",
    )
    p.add_argument("--algorithm", help="as for genie simulate")
    p.add_argument("--chunks", type=A.integer(1, 1024), default=1)
    A.add_comm_concurrency(p)
    A.add_streams(p)
    p.add_argument(
        "--max-collectives",
        type=A.integer(0, 1000000),
        default=64,
        help="isolated: refuse workloads with more distinct collectives (each runs alone)",
    )
    p.add_argument(
        "--max-instances",
        type=A.integer(0, 10**9),
        default=0,
        help="overlapped: refuse workloads with more communication instances (0: no cap; an "
        "agent holds buffers only for the instances in flight)",
    )
    p.add_argument(
        "--payload",
        choices=("lean", "real"),
        default="lean",
        help="overlapped: lean sends pattern bytes from a fixed region per rank (memory that "
        "does not grow with message sizes); real computes every collective in buffers of its "
        "own (memory: the instances in flight)",
    )
    add_dilation_argument(p, "compute gaps x K on the wire, every time reported / K")
    add_calibration_argument(p, "none")
    X.add_perturb_arguments(p)
    X.add_job_arguments(p, ranks_per_host=True)
    add_faults_argument(p, "the first measured run's Go (after --warmup)")
    cc.add_argument(p)
    p.add_argument("--store", default=None, help="run store file (default: genie's)")
    p.add_argument("--no-symmetry", action="store_true")
    p.add_argument("--trace", help="Chrome-trace JSON of the replay with measured times")
    p.add_argument(
        "--detail",
        action="store_true",
        help="print everything: how the wire ran it, per rank, where the time goes, the busiest "
        "links, every instance replayed and the model error per instance (default: the answer, "
        "the breakdown and the model error in about 40 lines)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _command() -> str:
    return " ".join(["genie", "emulate", *sys.argv[2:]]) if sys.argv else "genie emulate"


def spec_from_args(args: argparse.Namespace) -> EmulateSpec:
    """The ``EmulateSpec`` of ``genie emulate``'s command line."""
    jobs = X.jobs_spec(args)
    return EmulateSpec(
        testbed=args.testbed,
        workload="" if jobs else args.workload[0],
        jobs=jobs,
        mode=args.mode,
        iterations=args.iterations,
        warmup=args.warmup,
        placement=args.placement,
        ranks_per_host=args.ranks_per_host,
        algorithm=args.algorithm,
        chunks=args.chunks,
        comm_concurrency=args.comm_concurrency,
        streams=args.streams,
        max_collectives=args.max_collectives,
        max_instances=args.max_instances,
        payload=args.payload,
        dilation=args.dilation,
        calibration=args.calibration,
        perturb=X.perturb_spec(args),
        faults=args.faults,
        store=args.store or DEFAULT_STORE,
        symmetry=not args.no_symmetry,
        trace=args.trace,
        command=_command(),
    )


def render(e: Emulation, detail: bool = False) -> None:
    """Print an emulation's tables on stdout (120 columns when not a terminal, 160 for jobs);
    ``detail``: everything, else the short default."""
    tty = sys.stdout.isatty()
    if isinstance(e, Overlapped):
        print_overlapped(Console(width=None if tty else 120), e, detail)
    elif isinstance(e, Isolated):
        print_isolated(Console(width=None if tty else 120), e, detail)
    else:
        print_wire_jobs(Console(width=None if tty else 160), e.doc())


def run(args: argparse.Namespace) -> int:
    """Handle ``genie emulate``: parse -> spec -> ``genie.api.emulate`` -> render."""
    spec = spec_from_args(args)
    ccs = cc.algorithms(args.tcp_cc)
    if len(ccs) > 1:  # congestion control as an experiment: one run each, side by side
        if spec.jobs or spec.mode != "overlapped":
            raise UsageError("--tcp-cc with several algorithms compares one overlapped workload")
        results = {a: emulate(spec.replace(congestion=a)) for a in ccs}
        runs = {a: o for a, o in results.items() if isinstance(o, Overlapped)}
        if args.json:
            dump_json({"tcp_cc": {a: o.doc() for a, o in runs.items()}})
        else:
            cc.print_emulate(runs)
        return 0
    e = emulate(spec.replace(congestion=ccs[0]) if ccs else spec)
    if args.json:
        dump_json(e.doc())
    else:
        render(e, args.detail)
    return 0
