"""``genie emulate``: hardware in the loop (see ``genie.emulate``).

``--mode overlapped`` (the default) runs the whole trace's communication on the agents with the
compute gaps honoured, so collectives that overlap in the trace overlap on the wire; ``--mode
isolated`` measures each distinct collective alone. Either way the run goes through
``StoredRun``: stored with host facts and clock offsets, finished with its reason on any error.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from genie import progress
from genie.collectives.registry import parse_algorithms
from genie.commands import _args as A
from genie.commands._sim_output import describe, dump_json, print_reports, with_closed
from genie.errors import GenieError, UsageError
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload
from genie.sim.network import AnalyticalBackend
from genie.sim.report import chrome_trace
from genie.store import DEFAULT_STORE
from genie.units import format_bytes, format_seconds
from genie.wire.messages import DataOptions


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie emulate`` (hardware in the loop; see genie.emulate)."""
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
    p.add_argument("workload", help="workload prefix (files PREFIX.<rank>.et) or its directory")
    p.add_argument("--testbed", required=True, help="testbed TOML with running agents")
    p.add_argument(
        "--iterations",
        type=A.integer(1, 1000000),
        default=5,
        help="measured runs (of each collective / the trace)",
    )
    p.add_argument("--warmup", type=A.integer(0, 100000), default=2, help="warm-up runs")
    p.add_argument("--placement", choices=("testbed", "round-robin"), default="testbed")
    p.add_argument("--algorithm", help="as for genie simulate")
    p.add_argument("--chunks", type=A.integer(1, 1024), default=1)
    p.add_argument(
        "--max-collectives",
        type=A.integer(0, 1000000),
        default=64,
        help="refuse more distinct ones",
    )
    p.add_argument(
        "--max-instances",
        type=A.integer(0, 1000000),
        default=256,
        help="overlapped: refuse more communication instances (each has buffers of its own)",
    )
    p.add_argument(
        "--comm-concurrency",
        type=A.integer(0, 1024),
        default=1,
        metavar="N",
        help="overlapped: collectives of one process group in flight at once per rank; 1 "
        "(default) runs them in issue order, one at a time, as NCCL's per-communicator stream "
        "does; 0: no limit (each starts when its data dependencies allow)",
    )
    A.add_streams(p)
    p.add_argument("--store", default=None, help="run store file (default: genie's)")
    p.add_argument("--no-symmetry", action="store_true")
    p.add_argument("--trace", help="Chrome-trace JSON of the replay with measured times")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _workload_hash(cw: CompiledWorkload) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for r in cw.ranks:
        h.update(r.signature())
    return h.hexdigest()


@contextlib.contextmanager
def _live_run(cw: CompiledWorkload, tb, testbed_path, agents, *, store, meta, command, unit, total):
    """One stored emulate run on the agents: yields (run, progress bar).

    ``StoredRun`` starts the run in the store, connects the controller, syncs clocks and records
    host facts and offsets; on leaving, the run is finished as ok, interrupted or failed.
    """
    from genie.controller.stored_run import StoredRun

    meta = {"workload": cw.name, "placement": list(agents), **meta}
    with (
        StoredRun(
            tb, testbed_path, command, store=store, meta=meta, workload_hash=_workload_hash(cw)
        ) as run,
        progress.bar(f"{cw.name} on {tb.name}", total, unit) as bar,
    ):
        yield run, bar


def _command() -> str:
    return " ".join(["genie", "emulate", *sys.argv[2:]]) if sys.argv else "genie emulate"


def run(args: argparse.Namespace) -> int:
    """Handle ``genie emulate``."""

    from genie.controller.placement import place_ranks
    from genie.emulate.backends import TestbedBackend
    from genie.emulate.plan import distinct_transfers
    from genie.emulate.run import measure_all
    from genie.sim.program_pricer import ProgramPricer
    from genie.testbed import load_testbed

    if args.iterations < 1 or args.warmup < 0:
        raise UsageError("--iterations must be >= 1 and --warmup >= 0")
    with progress.stage("loading workload"):
        wl = load_workload(args.workload)
        cw = compile_workload(wl)
    tb = load_testbed(args.testbed)
    agents = place_ranks([(h.name, h.ranks) for h in tb.hosts], cw.n_ranks, args.placement)
    keys = distinct_transfers(cw)
    if len(keys) > args.max_collectives:
        raise UsageError(
            f"the workload has {len(keys)} distinct collectives (more than --max-collectives "
            f"{args.max_collectives})"
        )
    algos = parse_algorithms(args.algorithm)
    tb = tb.with_flows(args.streams or tb.routing.flows)  # the model prices the wire's flows
    topo = tb.to_topology()
    if args.mode == "overlapped":
        return _run_overlapped(args, cw, tb, agents, algos)
    meta = {"iterations": args.iterations, "mode": "isolated", "streams": tb.routing.flows}
    with _live_run(
        cw,
        tb,
        args.testbed,
        agents,
        store=args.store or DEFAULT_STORE,
        meta=meta,
        command=_command(),
        unit="collectives",
        total=len(keys),
    ) as (run, bar):

        def on_done(m, program, instances) -> None:
            run.add_instances(program.spec, instances)
            bar.advance()
            bar.describe(f"{m.collective} {m.key[1]} B done")

        table = measure_all(
            run.ctl,
            keys,
            agents,
            iters=args.iterations,
            warmup=args.warmup,
            algorithms=algos,
            chunks=args.chunks,
            topology=topo,
            on_done=on_done,
            model_placement=tb.rank_endpoints(agents),
            options=DataOptions(streams=tb.routing.flows),
        )
    run_id = run.run_id
    pricer = ProgramPricer(topo, tb.rank_endpoints(agents), cw.n_ranks, algos, args.chunks)
    backends = [
        TestbedBackend(table, name=f"testbed:{run_id}", pricer=pricer),
        AnalyticalBackend(pricer),
    ]
    reports = _replay_all(cw, backends, not args.no_symmetry, args.trace)
    rows = [
        {
            "collective": m.collective,
            "algorithm": m.algorithm,
            "ranks": list(m.key[2]),
            "size": m.key[1],
            "count": m.count,
            "measured_p50_s": m.p50,
            "measured_s": m.times,
            "modeled_s": m.modeled_s,
        }
        for m in table.values()
    ]
    if args.json:
        dump_json(
            {
                "run_id": run_id,
                "mode": "isolated",
                "workload": cw.name,
                "testbed": tb.name,
                "wire": wire_notes(tb, agents),
                "collectives": rows,
                "reports": [with_closed(r.to_dict(), {}) for r in reports],
            }
        )
        return 0
    con = Console(width=None if sys.stdout.isatty() else 120)
    t = Table(title=f"collectives measured on {tb.name} (run {run_id})", title_justify="left")
    for c in ("collective", "algorithm", "ranks", "size", "count", "measured p50", "model"):
        t.add_column(c, justify="left" if c in ("collective", "algorithm") else "right")
    t.add_column("meas/model", justify="right")
    for row in rows:
        model = row["modeled_s"]
        t.add_row(
            row["collective"],
            row["algorithm"],
            str(len(row["ranks"])),
            format_bytes(row["size"]),
            str(row["count"]),
            format_seconds(row["measured_p50_s"]),
            format_seconds(model) if model else "-",
            f"{row['measured_p50_s'] / model:.2f}" if model else "-",
        )
    con.print(t)
    for note in wire_notes(tb, agents):
        con.print(f"on the wire: {note}")
    print_reports(con, cw, describe(backends[1].pricer), reports, {}, 20)
    return 0


def wire_notes(tb, agents: list[str]) -> list[str]:
    """How the agents put this job on the wire, beyond the trace: intra-host steps and flows."""
    notes = [f"{tb.routing.flows} TCP connection(s) per rank pair (the flows the model prices)"]
    if len(set(agents)) < len(agents):
        bw, lat = tb.intra_host.bandwidth, tb.intra_host.latency
        notes.append(
            "steps between ranks of one host are not sent: the agent exchanges them in memory "
            f"and waits the intra-host model's time ({lat * 1e6:.3g} us + bytes / "
            f"{bw / 1e9:.4g} GB/s on each sending rank's port; times under the host's own copy "
            "and wake-up cost, tens of us, come out late)"
        )
    return notes


def _replay_all(cw: CompiledWorkload, backends: list, symmetry: bool, trace: str | None) -> list:
    """Replay the workload over each backend; the first one's timeline to ``trace``."""
    reports, raws = [], []
    with progress.stage(f"replaying {cw.n_nodes} nodes") as st:
        for be in backends:
            st.describe(f"replaying {cw.n_nodes} nodes over {be.name}")
            rep, raw = replay(cw, be, symmetry=symmetry)
            reports.append(rep)
            raws.append(raw)
    if trace:
        chrome_trace(cw, raws[0], trace)
    return reports


def _instances_of(plan, passes, warmup: int, iid: int) -> list:
    """The store's Instance rows of one communication instance, one per pass."""
    from genie.controller.results import Instance

    out = []
    ranks = list(plan.programs[iid].spec.ranks)
    for k, p in enumerate(passes):
        first, _last_start, end = p.inst[iid]
        starts, ends = [], []
        for r in ranks:
            j = plan.op_iid[r].index(iid)
            s, e = p.rank_times[r][j]
            starts.append(s)
            ends.append(e)
        out.append(
            Instance(
                iteration=k,
                warmup=k < warmup,
                start_ns=first,
                end_ns=end,
                time_s=(end - first) / 1e9,
                rank_start_ns=starts,
                rank_end_ns=ends,
                ranks=ranks,
            )
        )
    return out


@dataclass
class Overlapped:
    """What ``run_overlapped`` measured and replayed (``doc()`` is the ``--json`` document)."""

    run_id: str | None
    workload: str
    testbed: str
    network: str  # what the analytical backend priced
    wire: list[str]  # how the wire ran it: issue order, intra-host steps, routing
    rows: list[dict]  # per communication instance: measured and modelled
    runs: list[dict]  # per run of the trace (warm-up flagged)
    reports: list  # SimReport per backend: measured first, then analytical

    def doc(self) -> dict:
        """The JSON document of ``genie emulate --json``."""
        return {
            "run_id": self.run_id,
            "mode": "overlapped",
            "workload": self.workload,
            "testbed": self.testbed,
            "network": self.network,
            "wire": self.wire,
            "instances": self.rows,
            "runs": self.runs,
            "reports": [with_closed(r.to_dict(), {}) for r in self.reports],
        }


def run_overlapped(
    cw: CompiledWorkload,
    tb,
    testbed_path,
    agents: list[str],
    *,
    store: str | None,
    iterations: int,
    warmup: int,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    max_instances: int = 256,
    symmetry: bool = True,
    trace: str | None = None,
    command: str = "genie emulate",
    comm_concurrency: int = 1,
) -> Overlapped:
    """The whole trace's communication on the agents, then replayed measured and modelled."""
    from genie.collectives.cost import estimate
    from genie.emulate.backends import InstanceBackend
    from genie.emulate.plan import compile_oplists
    from genie.emulate.run import emulate_overlapped, instance_medians
    from genie.sim.program_pricer import ProgramPricer

    topo = tb.to_topology()
    algos = algorithms or {}
    with progress.stage("compiling op lists"):
        plan = compile_oplists(
            cw, algos, chunks, max_instances=max_instances, comm_concurrency=comm_concurrency
        )
    with _live_run(
        cw,
        tb,
        testbed_path,
        agents,
        store=store,
        meta={
            "iterations": iterations,
            "mode": "overlapped",
            "comm_concurrency": comm_concurrency,
            "streams": tb.routing.flows,
        },
        command=command,
        unit="runs of the trace",
        total=iterations + warmup,
    ) as (run, bar):

        def on_pass(k, p) -> None:
            bar.advance()
            bar.describe(f"run {k + 1}: {p.makespan_s:.4g} s")

        passes = emulate_overlapped(
            run.ctl,
            plan,
            agents,
            iters=iterations,
            warmup=warmup,
            on_pass=on_pass,
            options=DataOptions(streams=tb.routing.flows),
        )
        for iid, program in zip(plan.iids, plan.programs, strict=True):
            run.add_instances(program.spec, _instances_of(plan, passes, warmup, iid))
    run_id = run.run_id
    medians = instance_medians(passes, warmup)
    ends = tb.rank_endpoints(agents)  # each rank's NIC: where the model places it
    pricer = ProgramPricer(topo, ends, cw.n_ranks, algos, chunks)
    backends = [InstanceBackend(medians, name=f"testbed:{run_id}"), AnalyticalBackend(pricer)]
    reports = _replay_all(cw, backends, symmetry, trace)
    measured = passes[warmup:]
    rows = []
    for iid, program in zip(plan.iids, plan.programs, strict=True):
        spec = program.spec
        try:
            model = float(estimate(program, topo, [ends[r] for r in spec.ranks]).time_s)
        except GenieError:
            model = None
        rows.append(
            {
                "iid": iid,
                "collective": spec.collective,
                "algorithm": spec.algorithm,
                "ranks": list(spec.ranks),
                "size": int(cw.instances.size[iid]),
                "measured_p50_s": medians[iid],
                # per measured run: seconds from the run's start, first rank start / last
                # member's arrival / last rank end
                "intervals_s": [[(t - p.start_at_ns) / 1e9 for t in p.inst[iid]] for p in measured],
                # per measured run: [rank, start, end] of each member, seconds from the start
                "rank_intervals_s": [
                    [
                        [r, *((t - p.start_at_ns) / 1e9 for t in p.rank_times[r][j])]
                        for r, j in ((r, plan.op_iid[r].index(iid)) for r in spec.ranks)
                    ]
                    for p in measured
                ],
                "modeled_s": model,
            }
        )
    runs = [
        {
            "makespan_s": p.makespan_s,
            "bytes_sent": p.bytes_sent,
            "messages_verified": p.verified,
            "warmup": k < warmup,
        }
        for k, p in enumerate(passes)
    ]
    network = f"{describe(pricer)}; model of {tb.model_note()}"
    wire = [plan.describe_order(), *wire_notes(tb, agents)]
    return Overlapped(run_id, cw.name, tb.name, network, wire, rows, runs, reports)


def print_overlapped(con: Console, cw: CompiledWorkload, o: Overlapped, limit: int = 40) -> None:
    """The per-instance table, the trace's time on the wire, and the replay reports."""
    t = Table(
        title=f"communication of {cw.name} run on {o.testbed}, overlapped (run {o.run_id})",
        title_justify="left",
    )
    for c in ("instance", "collective", "ranks", "size", "measured p50", "model alone"):
        t.add_column(c, justify="left" if c == "collective" else "right")
    t.add_column("meas/model", justify="right")
    for row in o.rows[:limit]:
        model = row["modeled_s"]
        t.add_row(
            str(row["iid"]),
            f"{row['collective']} {row['algorithm']}",
            str(len(row["ranks"])),
            format_bytes(row["size"]),
            format_seconds(row["measured_p50_s"]),
            format_seconds(model) if model else "-",
            f"{row['measured_p50_s'] / model:.2f}" if model else "-",
        )
    con.print(t)
    if len(o.rows) > limit:
        con.print(f"({len(o.rows) - limit} more instances; --json lists all)")
    for note in o.wire:
        con.print(f"on the wire: {note}")
    spans = [r["makespan_s"] for r in o.runs if not r["warmup"]]
    con.print(
        f"trace on the wire: median {format_seconds(float(np.median(spans)))} from the common "
        f"start to the last op's end, over {len(spans)} runs"
    )
    print_reports(con, cw, o.network, o.reports, {}, 20)


def _run_overlapped(args, cw, tb, agents, algos) -> int:
    """``genie emulate --mode overlapped``: the whole trace's communication on the agents."""
    o = run_overlapped(
        cw,
        tb,
        args.testbed,
        agents,
        store=args.store or DEFAULT_STORE,
        iterations=args.iterations,
        warmup=args.warmup,
        algorithms=algos,
        chunks=args.chunks,
        max_instances=args.max_instances,
        symmetry=not args.no_symmetry,
        trace=args.trace,
        command=_command(),
        comm_concurrency=args.comm_concurrency,
    )
    if args.json:
        dump_json(o.doc())
        return 0
    print_overlapped(Console(width=None if sys.stdout.isatty() else 120), cw, o)
    return 0
