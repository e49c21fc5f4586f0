"""``genie emulate``: hardware in the loop, isolated mode (see ``genie.sim.emulate``).

Registered by ``genie.commands.simulate`` so the simulator's commands stay together.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from genie.commands.simulate import (
    _algorithms,
    _describe,
    _finite,
    _nan_safe,
    _print,
    _with_closed,
)
from genie.errors import GenieError, UsageError
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload
from genie.sim.network import AnalyticalBackend
from genie.sim.report import chrome_trace
from genie.units import format_bytes, format_seconds


def register_emulate(sub: argparse._SubParsersAction) -> None:
    """Add ``genie emulate`` (hardware in the loop, isolated mode; see genie.sim.emulate)."""
    p = sub.add_parser(
        "emulate",
        help="run every distinct collective of a workload on the testbed's agents and replay it",
        description="Hardware in the loop, isolated mode: each distinct (collective, size, "
        "group) of the workload runs on the live agents; the workload is then replayed with "
        "the measured times, beside the analytical model. Results go to the run store.",
    )
    p.add_argument("workload", help="workload prefix (files PREFIX.<rank>.et) or its directory")
    p.add_argument("--testbed", required=True, help="testbed TOML with running agents")
    p.add_argument("--iterations", type=int, default=5, help="measured runs per collective")
    p.add_argument("--warmup", type=int, default=2, help="warm-up runs per collective")
    p.add_argument("--placement", choices=("testbed", "round-robin"), default="testbed")
    p.add_argument("--algorithm", help="as for genie simulate")
    p.add_argument("--chunks", type=int, default=1)
    p.add_argument("--max-collectives", type=int, default=64, help="refuse more distinct ones")
    p.add_argument("--store", default=None, help="run store file (default: genie's)")
    p.add_argument("--no-symmetry", action="store_true")
    p.add_argument("--trace", help="Chrome-trace JSON of the replay with measured times")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_emulate)


def _workload_hash(cw: CompiledWorkload) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for r in cw.ranks:
        h.update(r.signature())
    return h.hexdigest()


def run_emulate(args: argparse.Namespace) -> int:
    """Handle ``genie emulate``."""
    from pathlib import Path

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from genie.controller.local import open_controller
    from genie.controller.placement import place_ranks
    from genie.sim.emulate import TestbedBackend, distinct_transfers, measure_all
    from genie.sim.program_pricer import ProgramPricer
    from genie.store import DEFAULT_STORE, RunStore
    from genie.testbed import load_testbed

    if args.iterations < 1 or args.warmup < 0:
        raise UsageError("--iterations must be >= 1 and --warmup >= 0")
    err = Console(stderr=True)
    with err.status("loading workload", spinner="dots"):
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
    algos = _algorithms(args.algorithm)
    topo = tb.to_topology()
    store = RunStore(args.store or DEFAULT_STORE)
    run_id = store.start_run(
        " ".join(["genie", "emulate", *sys.argv[2:]]) if sys.argv else "genie emulate",
        testbed_name=tb.name,
        testbed_text=Path(args.testbed).read_text(errors="replace"),
        workload_hash=_workload_hash(cw),
        meta={"workload": cw.name, "placement": agents, "iterations": args.iterations},
    )
    ctl = open_controller(tb)
    try:
        ctl.connect()
        ctl.sync_clocks()
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} collectives"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as prog:
            task = prog.add_task(f"{cw.name} on {tb.name}", total=len(keys))

            def on_done(m, program, instances) -> None:
                store.add_instances(run_id, program.spec, instances)
                prog.update(task, advance=1, description=f"{m.collective} {m.key[1]} B done")

            table = measure_all(
                ctl,
                keys,
                agents,
                iters=args.iterations,
                warmup=args.warmup,
                algorithms=algos,
                chunks=args.chunks,
                topology=topo,
                on_done=on_done,
            )
        store.finish_run(run_id, "ok")
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", "interrupted by user")
        raise
    except GenieError as exc:
        store.finish_run(run_id, "failed", str(exc))
        raise
    finally:
        ctl.close()
        ctl.t.close()
        store.close()
    pricer = ProgramPricer(topo, agents, cw.n_ranks, algos, args.chunks)
    backends = [
        TestbedBackend(table, name=f"testbed:{run_id}", pricer=pricer),
        AnalyticalBackend(pricer),
    ]
    reports, raws = [], []
    for be in backends:
        rep, raw = replay(cw, be, symmetry=not args.no_symmetry)
        reports.append(rep)
        raws.append(raw)
    if args.trace:
        chrome_trace(cw, raws[0], args.trace)
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
        doc = {
            "run_id": run_id,
            "workload": cw.name,
            "testbed": tb.name,
            "collectives": rows,
            "reports": [_with_closed(r.to_dict(), {}) for r in reports],
        }
        json.dump(_finite(doc), sys.stdout, indent=1, allow_nan=False, default=_nan_safe)
        sys.stdout.write("\n")
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
    _print(con, cw, _describe(backends[1].pricer), reports, {}, 20)
    return 0
