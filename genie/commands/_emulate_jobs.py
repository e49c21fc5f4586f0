"""``genie emulate A B ...``: several jobs on one fabric, on the wire, alone and together.

The jobs are merged into one workload (``genie.sim.jobs.merge_jobs``: the same job model as
``genie simulate A B``), compiled into op lists and run on the agents with ONE Go: every job's
ranks start at one instant, a late job's offset being the compute gap before its first
collective, so the jobs' flows really share the links they cross. Then each job runs alone on
its own hosts (same placement, nothing else on the wire). Every run is a stored run of its own
(``StoredRun``; meta ``jobs_phase`` says which). Per job the report gives the iteration measured
on the wire alone and together (measured instance times replayed, and the span from the job's
start to its last operation's end on the wire), the slowdown, and beside them the analytical
model's alone/together and the links it says the jobs contended on (``genie.commands._jobs``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from genie import progress
from genie.collectives.registry import parse_algorithms
from genie.commands import _experiments as X
from genie.commands._calibration import resolve as resolve_calibration
from genie.commands._jobs import (
    _hosts_text,
    job_cells,
    jobs_doc,
    print_contended,
    seconds_pair,
    slowdown_cells,
)
from genie.commands._sim_output import dump_json
from genie.errors import UsageError
from genie.sim import perturb
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.jobs import JobMap, JobSpec, job_times, merge_jobs
from genie.store import DEFAULT_STORE

MEASURED = "each instance's median time over the runs on the agents, replayed"


def job_span(rows: list[dict], iids: list[int], start_s: float) -> float:
    """Median over the measured runs of the time from a job's start to its last op's end on the
    wire (``rows``: ``Overlapped.rows``, whose intervals are seconds from the common start)."""
    mine = [r for r in rows if r["iid"] in set(iids)]
    if not mine:
        return 0.0
    n = min(len(r["intervals_s"]) for r in mine)
    ends = [max(r["intervals_s"][m][2] for r in mine) for m in range(n)]
    return float(np.median(ends)) - start_s if ends else 0.0


def wire_doc(jm: JobMap, together: Any, alone: list[Any], prefixes: list[str]) -> dict:
    """The ``--json`` document: the model's jobs document with the wire's figures per job."""
    model = jobs_doc(
        jm,
        together.raws[1],
        together.reports[1],
        together.backends[1],
        together.backends[1].pricer,
        [(j.name, a.backends[1], a.reports[1]) for j, a in zip(jm.jobs, alone, strict=True)],
        prefixes,
    )
    measured = job_times(jm, together.raws[0])
    for k, (row, job) in enumerate(zip(model["jobs"], jm.jobs, strict=True)):
        a, t = alone[k].reports[0].iteration_s, measured[k].iteration_s
        spans = [r["makespan_s"] for r in alone[k].runs if not r["warmup"]]
        span_a = float(np.median(spans)) if spans else 0.0
        span_t = job_span(together.rows, job.instances, job.start_s)
        row.update(
            {
                "model_alone_s": row.pop("alone_s"),
                "model_together_s": row.pop("together_s"),
                "model_slowdown": row.pop("slowdown"),
                "measured_alone_s": a,
                "measured_together_s": t,
                "measured_slowdown": t / a if a > 0 else float("nan"),
                "wire_span_alone_s": span_a,
                "wire_span_together_s": span_t,
                "wire_span_slowdown": span_t / span_a if span_a > 0 else float("nan"),
                "run_alone": alone[k].run_id,
            }
        )
    return {
        "mode": "overlapped, several jobs",
        "testbed": together.testbed,
        "run_together": together.run_id,
        "measured": MEASURED,
        "network": together.network,
        **model,
        "wire": together.wire,
    }


def print_wire_jobs(con: Console, doc: dict) -> None:
    """Per job: measured alone / together / slowdown beside the model's; contended links."""
    t = Table(
        title=f"jobs on {doc['testbed']}: measured on the wire (runs: together "
        f"{doc['run_together']}, alone {', '.join(str(j['run_alone']) for j in doc['jobs'])}) "
        "beside the analytical model",
        title_justify="left",
    )
    cols = ["job", "ranks", "hosts", "start", "measured alone", "measured together", "slowdown"]
    cols += ["wire span alone / together", "model alone", "model together", "model slowdown"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("job", "hosts") else "right")
    for j in doc["jobs"]:
        t.add_row(
            *job_cells(j),
            *slowdown_cells(j, "measured_"),
            seconds_pair(j["wire_span_alone_s"], j["wire_span_together_s"]),
            *slowdown_cells(j, "model_"),
        )
    con.print(t)
    con.print(
        f"measured: {doc['measured']}; wire span: from the job's start to its last collective's "
        "end on the wire (median over the runs); model: " + doc["model"]
    )
    for note in doc["wire"]:
        con.print(f"on the wire: {note}")
    con.print(f"contended links below are the model's ({doc['network']})")
    print_contended(con, doc)


def run_jobs(args: argparse.Namespace) -> int:
    """Handle ``genie emulate A B ...`` (see the module docstring)."""
    from genie.commands.emulate import _command, run_overlapped
    from genie.testbed import load_testbed

    if args.mode != "overlapped":
        raise UsageError("several jobs run in --mode overlapped only (one Go for every job)")
    names = X.job_names(args.workload, args.job_name)
    pert = X.perturbation(args)
    cws = []
    with progress.stage("loading workloads") as st:
        for pre in args.workload:
            st.describe(f"loading {pre}")
            cws.append(compile_workload(load_workload(pre)))  # run_overlapped orders them
    layout, starts = X.job_layout(args, [cw.n_ranks for cw in cws])
    tb = load_testbed(args.testbed)
    top = max((max(h) for h in layout), default=0)
    if top >= len(tb.hosts):
        raise UsageError(
            f"host {top} named, but testbed {tb.name} has {len(tb.hosts)} hosts "
            f"(0..{len(tb.hosts) - 1})"
        )
    bases = np.cumsum([0, *[cw.n_ranks for cw in cws]]).tolist()
    perturb.check_ranks(pert, bases[-1])
    pcws = [perturb.apply(cw, pert, bases[k]) for k, cw in enumerate(cws)]
    specs = [JobSpec(names[k], pcws[k], layout[k], starts[k]) for k in range(len(cws))]
    merged, jm = merge_jobs(specs)
    tb = tb.with_flows(args.streams or tb.routing.flows)
    agents = [tb.hosts[h].name for h in jm.placement]
    store = args.store or DEFAULT_STORE
    jobs_meta = [
        {"name": j.name, "workload": args.workload[k], "hosts": _hosts_text(j.hosts),
         "start_s": j.start_s, "ranks": [j.ranks.start, j.ranks.stop - 1]}
        for k, j in enumerate(jm.jobs)
    ]  # fmt: skip
    common: dict[str, Any] = {
        "store": store,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "algorithms": parse_algorithms(args.algorithm),
        "chunks": args.chunks,
        "max_instances": args.max_instances,
        "symmetry": not args.no_symmetry,
        "command": _command(),
        "calibration": resolve_calibration(args.calibration, store, tb.name),
        "dilation": args.dilation,
        "asked": args.calibration,
        "comm_concurrency": args.comm_concurrency,
    }
    together = run_overlapped(
        merged,
        tb,
        args.testbed,
        agents,
        trace=args.trace,
        meta={"jobs": jobs_meta, "jobs_phase": "together"},
        **common,
    )
    alone = []
    for k, job in enumerate(jm.jobs):
        alone.append(
            run_overlapped(
                pcws[k],
                tb,
                args.testbed,
                agents[job.ranks.start : job.ranks.stop],
                meta={"jobs": jobs_meta, "jobs_phase": f"alone: {job.name}"},
                **common,
            )
        )
    doc = wire_doc(jm, together, alone, list(args.workload))
    if args.json:
        dump_json(doc)
        return 0
    print_wire_jobs(Console(width=None if sys.stdout.isatty() else 160), doc)
    return 0
