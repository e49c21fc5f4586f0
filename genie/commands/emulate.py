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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from genie import progress
from genie.collectives.registry import parse_algorithms
from genie.commands import _args as A
from genie.commands import _experiments as X
from genie.commands._calibration import add_argument as add_calibration_argument
from genie.commands._calibration import add_dilation_argument
from genie.commands._calibration import resolve as resolve_calibration
from genie.commands._faults import add_argument as add_faults_argument
from genie.commands._faults import plan as plan_faults
from genie.commands._faults import print_applied, widen_timeouts
from genie.commands._model_error import print_error_table
from genie.commands._sim_output import describe, dump_json, print_reports, with_closed
from genie.errors import UsageError
from genie.sim import perturb
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.attribution import busiest_links
from genie.sim.compiled import CompiledWorkload
from genie.sim.report import chrome_trace
from genie.sim.streams import order_collectives
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
    p.add_argument("--placement", choices=("testbed", "round-robin"), default="testbed")
    p.add_argument("--algorithm", help="as for genie simulate")
    p.add_argument("--chunks", type=A.integer(1, 1024), default=1)
    A.add_comm_concurrency(p)
    A.add_streams(p)
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
    add_dilation_argument(p, "compute gaps x K on the wire, every time reported / K")
    add_calibration_argument(p, "latest")
    X.add_perturb_arguments(p)
    X.add_job_arguments(p, ranks_per_host=True)
    add_faults_argument(p, "the first measured run's Go (after --warmup)")
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
def _live_run(
    cw: CompiledWorkload,
    tb,
    testbed_path,
    agents,
    *,
    store,
    meta,
    command,
    unit,
    total,
    timeouts=None,
):
    """One stored emulate run on the agents: yields (run, progress bar).

    ``StoredRun`` starts the run in the store, connects the controller, syncs clocks and records
    host facts and offsets; on leaving, the run is finished as ok, interrupted or failed.
    ``timeouts``: the controller's (``Timeouts``; None: the defaults).
    """
    from genie.controller.stored_run import StoredRun

    meta = {"workload": cw.name, "placement": list(agents), **meta}
    with (
        StoredRun(
            tb,
            testbed_path,
            command,
            store=store,
            meta=meta,
            workload_hash=_workload_hash(cw),
            timeouts=timeouts,
        ) as run,
        progress.bar(f"{cw.name} on {tb.name}", total, unit) as bar,
    ):
        yield run, bar


def _command() -> str:
    return " ".join(["genie", "emulate", *sys.argv[2:]]) if sys.argv else "genie emulate"


def run(args: argparse.Namespace) -> int:
    """Handle ``genie emulate``."""

    from genie.calibration.accuracy import ErrorRow
    from genie.controller.placement import place_ranks
    from genie.emulate.backends import TestbedBackend
    from genie.emulate.compare import iteration_row
    from genie.emulate.compare import models as compare_models
    from genie.emulate.plan import distinct_transfers, plan_key
    from genie.emulate.run import measure_all
    from genie.testbed import load_testbed

    if args.iterations < 1 or args.warmup < 0:
        raise UsageError("--iterations must be >= 1 and --warmup >= 0")
    if X.wants_jobs(args):
        if args.faults:
            raise UsageError("--faults runs with one workload (not with several jobs) so far")
        from genie.commands._emulate_jobs import run_jobs

        return run_jobs(args)
    with progress.stage("loading workload"):
        wl = load_workload(args.workload[0])
        base = compile_workload(wl)
        pert = X.perturbation(args)
        cw = perturb.apply(base, pert)  # the compute gaps on the wire are the perturbed ones
    tb = load_testbed(args.testbed)
    faults = _fault_plan(args, tb)
    agents = place_ranks([(h.name, h.ranks) for h in tb.hosts], cw.n_ranks, args.placement)
    keys = distinct_transfers(cw)
    if args.mode == "isolated" and cw.instances.splits:
        raise UsageError(
            f"the workload has {len(cw.instances.splits)} uneven all-to-alls (all-to-all-v), "
            "which isolated mode does not measure: use --mode overlapped (the default)"
        )
    if len(keys) > args.max_collectives:
        raise UsageError(
            f"the workload has {len(keys)} distinct collectives (more than --max-collectives "
            f"{args.max_collectives})"
        )
    algos = parse_algorithms(args.algorithm)
    tb = tb.with_flows(args.streams or tb.routing.flows)  # the model prices the wire's flows
    topo = tb.to_topology()
    store = args.store or DEFAULT_STORE
    cal = resolve_calibration(args.calibration, store, tb.name)
    if args.mode == "overlapped":
        return _run_overlapped(args, cw, tb, agents, algos, cal, base, pert, faults)
    cw = order_collectives(cw, args.comm_concurrency)  # the replays run the issue order
    base = order_collectives(base, args.comm_concurrency)
    k = args.dilation
    models = compare_models(topo, cal, k, tb.model_note(), args.calibration)
    ends = tb.rank_endpoints(agents)  # each rank's NIC: where the model places it
    meta = {
        "iterations": args.iterations,
        "mode": "isolated",
        "calibration": cal.cal_id if cal else None,
        "dilation": k,
        "streams": tb.routing.flows,
    }
    with _live_run(
        cw,
        tb,
        args.testbed,
        agents,
        store=store,
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
            on_done=on_done,
            model_placement=ends,
            options=DataOptions(streams=tb.routing.flows),
        )
    run_id = run.run_id
    calibrated: dict = {}
    for key, m in table.items():
        m.times = [t / k for t in m.times]  # dilated: the wire's times / k
        m.modeled_s, calibrated[key] = models.price(
            plan_key(key, algos, args.chunks), [ends[r] for r in key[2]]
        )
    model_backends = models.backends(ends, cw.n_ranks, algos, args.chunks, cw.instances.splits)

    def measured_backend():
        return TestbedBackend(table, name=f"testbed:{run_id}", pricer=model_backends[0].pricer)

    backends = [measured_backend(), *model_backends]
    reports, _ = _replay_all(
        cw, backends, not args.no_symmetry, args.trace, (base, pert, measured_backend)
    )
    notes = [n for n in [models.dilation_note(cw, ends, algos, args.chunks, True)] if n]
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
            "calibrated_s": calibrated[key],
        }
        for key, m in table.items()
    ]
    errors = [
        ErrorRow(
            f"{r['collective']} n={len(r['ranks'])}",
            r["size"],
            r["measured_p50_s"],
            r["modeled_s"],
            r["calibrated_s"],
        )
        for r in rows
    ]
    iteration = iteration_row(reports, "iteration (replayed)")
    if args.json:
        dump_json(
            {
                "run_id": run_id,
                "mode": "isolated",
                "workload": cw.name,
                "testbed": tb.name,
                "calibration": cal.cal_id if cal else None,
                "dilation": k,
                "wire": wire_notes(tb, agents),
                "collectives": rows,
                "model_error": [e.to_dict() for e in [*errors, iteration]],
                "notes": notes,
                "reports": [with_closed(r.to_dict(), {}) for r in reports],
            }
        )
        return 0
    con = Console(width=None if sys.stdout.isatty() else 120)
    dil = f", dilated x{k:g} (times / {k:g})" if k != 1 else ""
    t = Table(title=f"collectives measured on {tb.name} (run {run_id}){dil}", title_justify="left")
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
    _print_errors(con, errors, iteration, models, notes)
    return 0


def _fault_plan(args: argparse.Namespace, tb) -> Any:
    """The ``--faults`` schedule resolved on ``tb`` (None without one); refused where it
    cannot run (isolated mode, dilation, lab hosts that did not opt in)."""
    if args.faults and args.mode != "overlapped":
        raise UsageError("--faults runs in --mode overlapped (one timeline from the first Go)")
    return plan_faults(args.faults, tb, args.dilation)


def wire_notes(tb, agents: list[str], sets: int = 1) -> list[str]:
    """How the agents put this job on the wire, beyond the trace: intra-host steps and flows
    (``sets``: connection sets per rank pair, one per process group; ``OpListPlan.channels``)."""
    from genie.emulate.plan import describe_connections

    notes = [describe_connections(tb.routing.flows, sets)]
    if len(set(agents)) < len(agents):
        bw, lat = tb.intra_host.bandwidth, tb.intra_host.latency
        notes.append(
            "steps between ranks of one host are not sent: the agent exchanges them in memory "
            f"and waits the intra-host model's time ({lat * 1e6:.3g} us + bytes / "
            f"{bw / 1e9:.4g} GB/s on each sending rank's port; times under the host's own copy "
            "and wake-up cost, tens of us, come out late)"
        )
    return notes


def _print_errors(con: Console, errors, iteration, models, notes, limit: int = 40) -> None:
    """The model-error tables (collectives, then the iteration) and the run's notes."""
    hint = models.missing
    print_error_table(
        con,
        "model error per collective",
        errors[:limit],
        models.nominal_label,
        models.calibration,
        hint,
    )
    if len(errors) > limit:
        con.print(f"({len(errors) - limit} more rows; --json lists all)")
    print_error_table(
        con,
        "model error of the iteration: measured times replayed vs the models replayed",
        [iteration],
        models.nominal_label,
        models.calibration,
        hint,
    )
    for note in notes:
        con.print(note, markup=False, highlight=False)


def _replay_all(
    cw: CompiledWorkload,
    backends: list,
    symmetry: bool,
    trace: str | None,
    stragglers: tuple | None = None,
) -> tuple[list, list]:
    """Replay the workload over each backend; the first one's timeline to ``trace``; return
    the reports and the raw results (one each per backend).

    ``stragglers``: (the unperturbed workload, the perturbation, a factory of the first
    backend): the first replay then says what the stragglers cost and who waited on whom.
    """
    reports, raws = [], []
    with progress.stage(f"replaying {cw.n_nodes} nodes") as st:
        for k, be in enumerate(backends):
            st.describe(f"replaying {cw.n_nodes} nodes over {be.name}")
            if k == 0 and stragglers is not None and stragglers[1]:
                base, pert, fresh = stragglers
                rep, raw = X.replay_perturbed(cw, base, be, fresh, pert, symmetry)
                rep.notes.append(f"stragglers/jitter: {pert.describe()}")
            else:
                rep, raw = replay(cw, be, symmetry=symmetry)
                rep.links = busiest_links(be, rep.iteration_s)
            reports.append(rep)
            raws.append(raw)
    if trace:
        chrome_trace(cw, raws[0], trace)
    return reports, raws


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
    wire: list[str]  # how the wire ran it: issue order, intra-host steps, flows
    rows: list[dict]  # per communication instance: measured and modelled
    runs: list[dict]  # per run of the trace (warm-up flagged)
    reports: list  # SimReport per backend: measured, analytical nominal, [calibrated]
    models: Any = None  # genie.emulate.compare.Models the run was compared with
    notes: list[str] = field(default_factory=list)
    raws: list = field(default_factory=list)  # the replays' raw results, one per report
    backends: list = field(default_factory=list)  # the replays' backends, one per report
    faults: dict | None = None  # link faults: schedule, applied, restored, effect
    # the replay with measured times: when its last communication ended (the wire's makespan
    # stops there; the iteration also counts the compute after it)
    replay_comm_end_s: float | None = None

    def errors(self) -> list:
        """Per instance: measured vs nominal vs calibrated (``ErrorRow``)."""
        from genie.calibration.accuracy import ErrorRow

        return [
            ErrorRow(
                f"{r['iid']}: {r['collective']} n={len(r['ranks'])}",
                r["size"],
                r["measured_p50_s"],
                r["modeled_s"],
                r.get("calibrated_s"),
            )
            for r in self.rows
        ]

    def iteration(self) -> Any:
        """The iteration replayed with measured times vs with each model (``ErrorRow``)."""
        from genie.emulate.compare import iteration_row

        return iteration_row(self.reports, "iteration (replayed)")

    def doc(self) -> dict:
        """The JSON document of ``genie emulate --json``."""
        cal = self.models.calibration if self.models else None
        return {
            "run_id": self.run_id,
            "mode": "overlapped",
            "workload": self.workload,
            "testbed": self.testbed,
            "network": self.network,
            "wire": self.wire,
            "calibration": cal.cal_id if cal else None,
            "dilation": self.models.k if self.models else 1.0,
            "instances": self.rows,
            "runs": self.runs,
            "replay_comm_end_s": self.replay_comm_end_s,
            "model_error": [e.to_dict() for e in [*self.errors(), self.iteration()]],
            "notes": self.notes,
            "reports": [with_closed(r.to_dict(), {}) for r in self.reports],
            **({"faults": self.faults} if self.faults is not None else {}),
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
    calibration: Any = None,
    dilation: float = 1.0,
    asked: str = "latest",
    unperturbed: CompiledWorkload | None = None,
    perturbation: Any = None,
    comm_concurrency: int = 1,
    meta: dict | None = None,
    faults: Any = None,
) -> Overlapped:
    """The whole trace's communication on the agents, then replayed measured and modelled.

    ``cw`` (and ``unperturbed``) are compiled workloads without the issue order: the op lists
    and the replays each apply ``comm_concurrency`` their own way.

    With ``dilation`` K the compute gaps run K times longer on the wire and every time is read
    divided by K (``genie.calibration.dilation``); ``calibration`` adds the calibrated model;
    ``meta`` is stored with the run beside what the run says of itself; ``faults`` (a
    ``genie.faults.schedule.FaultPlan``) is applied during the runs, timed from the first
    measured run's Go,
    recorded with the run and undone afterwards (``genie.faults.netns``).
    """
    from genie.calibration.dilation import check_dilation
    from genie.emulate.backends import InstanceBackend
    from genie.emulate.compare import last_comm_end_s
    from genie.emulate.compare import models as compare_models
    from genie.emulate.plan import compile_oplists, dilate_plan
    from genie.emulate.run import emulate_overlapped, instance_medians

    k = check_dilation(dilation)
    models = compare_models(tb.to_topology(), calibration, k, tb.model_note(), asked)
    ends = tb.rank_endpoints(agents)  # each rank's NIC: where the model places it
    algos = algorithms or {}
    with progress.stage("compiling op lists"):
        # the op lists carry the issue order themselves, as waits with no compute gap; planned
        # on an ordered workload, a collective would wait its compute gap again after the one
        # before it ended, though that compute ran while the one before was on the wire
        plan = compile_oplists(
            cw, algos, chunks, max_instances=max_instances, comm_concurrency=comm_concurrency
        )
        cw = order_collectives(cw, comm_concurrency)  # what the replays and the store see
        if unperturbed is not None:
            unperturbed = order_collectives(unperturbed, comm_concurrency)
        if k != 1:
            plan = dilate_plan(plan, k)
    meta = {
        "iterations": iterations,
        "mode": "overlapped",
        "calibration": calibration.cal_id if calibration else None,
        "dilation": k,
        "comm_concurrency": comm_concurrency,
        "streams": tb.routing.flows,
        **(meta or {}),
    }
    with _live_run(
        cw,
        tb,
        testbed_path,
        agents,
        store=store,
        meta=meta,
        command=command,
        unit="runs of the trace",
        total=iterations + warmup,
        timeouts=widen_timeouts(None, faults) if faults is not None else None,
    ) as (run, bar):

        def on_pass(j, p) -> None:
            bar.advance()
            bar.describe(f"run {j + 1}: {p.makespan_s / k:.4g} s")

        with contextlib.ExitStack() as undo:
            sched = None
            if faults is not None:
                from genie.commands._faults import scheduler

                sched = undo.enter_context(scheduler(faults, run.ctl.clock.now, testbed_path))
            passes = emulate_overlapped(
                run.ctl,
                plan,
                agents,
                iters=iterations,
                warmup=warmup,
                on_pass=on_pass,
                options=plan.data_options(tb.routing.flows),
                on_start=sched.start if sched else None,
            )
        fault_doc = None
        if sched is not None:
            fault_doc = _fault_doc(sched.records(), passes, warmup)
            run.update_meta(faults=fault_doc)
        for iid, program in zip(plan.iids, plan.programs, strict=True):
            run.add_instances(program.spec, _instances_of(plan, passes, warmup, iid))
    run_id = run.run_id
    medians = {iid: t / k for iid, t in instance_medians(passes, warmup).items()}
    model_backends = models.backends(ends, cw.n_ranks, algos, chunks, cw.instances.splits)

    def measured_backend():
        return InstanceBackend(medians, name=f"testbed:{run_id}")

    backends = [measured_backend(), *model_backends]
    strag = (unperturbed, perturbation, measured_backend) if unperturbed is not None else None
    reports, raws = _replay_all(cw, backends, symmetry, trace, strag)
    measured = passes[warmup:]
    rows = []
    for iid, program in zip(plan.iids, plan.programs, strict=True):
        spec = program.spec
        nominal, calibrated = models.price(program, [ends[r] for r in spec.ranks])
        rows.append(
            {
                "iid": iid,
                "collective": spec.collective,
                "algorithm": spec.algorithm,
                "ranks": list(spec.ranks),
                "size": int(cw.instances.size[iid]),
                "measured_p50_s": medians[iid],
                # per measured run: seconds from the run's start, first rank start / last
                # member's arrival / last rank end (divided by the dilation)
                "intervals_s": [
                    [(t - p.start_at_ns) / 1e9 / k for t in p.inst[iid]] for p in measured
                ],
                # per measured run: [rank, start, end] of each member, seconds from the start
                "rank_intervals_s": [
                    [
                        [r, *((t - p.start_at_ns) / 1e9 / k for t in p.rank_times[r][j])]
                        for r, j in ((r, plan.op_iid[r].index(iid)) for r in spec.ranks)
                    ]
                    for p in measured
                ],
                "modeled_s": nominal,
                "calibrated_s": calibrated,
            }
        )
    runs = [
        {
            "makespan_s": p.makespan_s / k,
            # from the first measured run's Go (warm-up runs: before it)
            "start_s": (p.start_at_ns - passes[min(warmup, len(passes) - 1)].start_at_ns) / 1e9 / k,
            "bytes_sent": p.bytes_sent,
            "messages_verified": p.verified,
            "warmup": j < warmup,
        }
        for j, p in enumerate(passes)
    ]
    network = f"{describe(model_backends[0].pricer)}; model of {models.nominal_label}"
    notes = [n for n in [models.dilation_note(cw, ends, algos, chunks, symmetry)] if n]
    wire = [plan.describe_order(), *wire_notes(tb, agents, plan.n_channels)]
    if fault_doc is not None and trace:
        _trace_faults(trace, fault_doc, runs, cw.n_ranks)
    return Overlapped(
        run_id,
        cw.name,
        tb.name,
        network,
        wire,
        rows,
        runs,
        reports,
        models,
        notes,
        raws,
        backends,
        fault_doc,
        last_comm_end_s(raws[0]) if raws else None,
    )


def _fault_doc(records: dict, passes: list, warmup: int) -> dict:
    """The run's fault records with each run's overlap and the effect on iteration time."""
    from genie.faults.effect import fault_effect, fault_windows

    t0 = passes[min(warmup, len(passes) - 1)].start_at_ns if passes else 0
    runs = [
        {"start_s": (p.start_at_ns - t0) / 1e9, "makespan_s": p.makespan_s, "warmup": j < warmup}
        for j, p in enumerate(passes)
    ]
    end = max((r["start_s"] + r["makespan_s"] for r in runs), default=0.0)
    windows = fault_windows(records, end)
    effect = fault_effect([r for r in runs if not r["warmup"]], windows)
    return {**records, "run_end_s": end, "effect": effect}


def _trace_faults(path: str, fault_doc: dict, runs: list[dict], n_ranks: int) -> None:
    """Add the wire's runs and the applied faults to the Chrome trace at ``path``."""
    import json
    from pathlib import Path

    from genie.faults.effect import trace_events

    p = Path(path)
    doc = json.loads(p.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    events.extend(trace_events(fault_doc, runs, n_ranks + 1))
    p.write_text(json.dumps(doc))


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
    dil = f" (divided by the dilation {o.models.k:g})" if o.models and o.models.k != 1 else ""
    con.print(
        f"trace on the wire: median {format_seconds(float(np.median(spans)))} from the common "
        f"start to the last op's end, over {len(spans)} runs{dil}"
    )
    if o.replay_comm_end_s is not None and o.reports:
        con.print(
            f"replayed with these times: last communication ends at "
            f"{format_seconds(o.replay_comm_end_s)}, the iteration at "
            f"{format_seconds(o.reports[0].iteration_s)} (compute after the last communication "
            "is replayed, not run on the wire)"
        )
    if o.faults is not None:
        print_faults(con, o.faults)
    print_reports(con, cw, o.network, o.reports, {}, 20)
    _print_errors(con, o.errors(), o.iteration(), o.models, o.notes, limit)


def print_faults(con: Console, f: dict) -> None:
    """The link faults as applied (from the first measured run's Go) and their effect."""
    print_applied(con, f, "the first measured run's Go")
    e = f["effect"]
    base = e["clean_median_s"]
    con.print(
        f"runs overlapping no fault: {e['clean_runs']}, median "
        f"{format_seconds(base) if base is not None else '-'} (measured on the wire)"
    )
    for x in e["events"]:
        med, ratio = x["median_s"], x["vs_clean"]
        con.print(
            f"runs overlapping '{x['label']}' ({format_seconds(x['from_s'])} to "
            f"{format_seconds(x['to_s'])}): {x['runs']}, median "
            f"{format_seconds(med) if med is not None else '-'}"
            + (f", {ratio:.2f}x the runs without faults" if ratio is not None else "")
        )


def _run_overlapped(args, cw, tb, agents, algos, cal, base, pert, faults=None) -> int:
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
        calibration=cal,
        dilation=args.dilation,
        asked=args.calibration,
        unperturbed=base,
        perturbation=pert,
        comm_concurrency=args.comm_concurrency,
        faults=faults,
    )
    if args.json:
        dump_json(o.doc())
        return 0
    print_overlapped(Console(width=None if sys.stdout.isatty() else 120), cw, o)
    return 0
