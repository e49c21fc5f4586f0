"""``genie bench``: sweep a collective over sizes on a live testbed, nccl-tests style.

Prints, per size, nccl-tests' columns (size, count, type, time, algbw, busbw) with time as the
p50 over measured iterations, then p99, min, max, the cost model's time and measured/modeled;
then the model's error per size, nominal and calibrated (``--calibration``). Bandwidths are
GB/s = 10^9 bytes/s. Every instance goes to the run store (as measured, undilated).

``--dilation K`` reports every time divided by K (bandwidths times K): the lab's links standing
for links K times faster; the report says what does not scale (``genie.calibration.dilation``).

``--faults SCHEDULE`` changes links while the sweep runs (``genie.faults.schedule``), timed from
``FAULT_ORIGIN``: the warm-ups of each size run in a Go of their own, so the clock starts with
the first measured iteration. The report gives, per size, the p50 of the iterations that
overlapped a fault beside those that overlapped none; the stored run's meta keeps it all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from genie import progress
from genie.calibration.accuracy import error_pct
from genie.commands import _args as A
from genie.commands._calibration import add_argument as add_calibration_argument
from genie.commands._calibration import add_dilation_argument
from genie.commands._faults import add_argument as add_faults_argument
from genie.errors import GenieError, UsageError
from genie.store import DEFAULT_STORE

FAULT_ORIGIN = "the first measured Go of the first size (after its warm-ups)"


@dataclass
class BenchConfig:
    """Everything one bench run needs (the CLI and ``genie demo`` fill it)."""

    testbed_path: str
    collective: str = "all_reduce"
    algorithm: str | None = None
    sizes: Sequence[int] = (1024,)
    iters: int = 20
    warmup: int = 5
    ranks: int | None = None
    placement: str = "testbed"
    chunks: int = 1
    streams: int | None = None  # TCP connections per rank pair; None: the testbed's flows
    sndbuf: int = 0
    rcvbuf: int = 0
    verify: bool = True
    store: str | None = DEFAULT_STORE
    command: str = ""
    progress: bool = True
    transport: str | None = None  # "tcp" | "rdma"; None takes the testbed file's transport
    timeouts: object = None  # genie.controller.session.Timeouts; None = defaults
    calibration: str | None = None  # --calibration: an id, "latest" or None/"none"
    dilation: float = 1.0  # report times / dilation (see the module docstring)
    calibration_used: object = None  # set by run_bench: the Calibration that priced, or None
    notes: list[str] = field(default_factory=list)  # set by run_bench: what the report must say
    faults: str | None = None  # --faults: a schedule or a file of one (genie.faults.schedule)
    fault_doc: dict | None = None  # set by run_bench: the faults as applied and their effect


def run_bench(cfg: BenchConfig):
    """Run the sweep; return (run_id or None, rows, clock offsets). Stores as it goes."""
    from genie.calibration.dilation import check_dilation
    from genie.calibration.model import calibrate_topology
    from genie.collectives.registry import canonical_algorithm, canonical_collective
    from genie.commands import _faults
    from genie.commands._calibration import resolve
    from genie.controller.bench import plan_sizes, sweep
    from genie.controller.placement import place_ranks
    from genie.controller.stored_run import StoredRun
    from genie.testbed import load_testbed
    from genie.units import format_bytes
    from genie.wire.messages import DataOptions, RdmaOptions

    tb = load_testbed(cfg.testbed_path)
    k = check_dilation(cfg.dilation)
    fault_plan = _faults.plan(cfg.faults, tb, k)
    timeouts = _faults.widen_timeouts(cfg.timeouts, fault_plan) if fault_plan else cfg.timeouts
    cal = resolve(cfg.calibration, cfg.store, tb.name)
    cfg.calibration_used = cal
    coll = canonical_collective(cfg.collective)
    from genie.collectives.registry import DEFAULT_ALGORITHM

    algo = canonical_algorithm(coll, cfg.algorithm or DEFAULT_ALGORITHM[coll])
    cfg.collective, cfg.algorithm = coll, algo  # report the names actually run
    placement = place_ranks([(h.name, h.ranks) for h in tb.hosts], cfg.ranks, cfg.placement)
    rph = max(h.ranks for h in tb.hosts)
    programs = plan_sizes(
        coll, algo, len(placement), cfg.sizes, chunks=cfg.chunks, ranks_per_host=rph
    )
    cfg.streams = cfg.streams or tb.routing.flows  # the flows the model prices, on the wire
    try:
        topology = tb.with_flows(cfg.streams).to_topology()
    except (GenieError, ValueError, KeyError):
        topology = None
    calibrated = calibrate_topology(topology, cal) if cal and topology else None
    transport = cfg.transport or tb.transport
    rdma = RdmaOptions(devices={h.name: h.rdma_device for h in tb.hosts if h.rdma_device})
    opts = DataOptions(
        streams=cfg.streams,
        sndbuf=cfg.sndbuf,
        rcvbuf=cfg.rcvbuf,
        verify=cfg.verify,
        transport=transport,
        rdma=rdma,
    )
    meta = {
        "collective": coll,
        "algorithm": algo,
        "sizes": list(cfg.sizes),
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "placement": placement,
        "options": msgspec.to_builtins(opts),
        "calibration": cal.cal_id if cal else None,
        "dilation": k,
    }
    rows = []
    command = cfg.command or "genie bench"
    with StoredRun(
        tb, cfg.testbed_path, command, store=cfg.store, meta=meta, timeouts=timeouts
    ) as run:
        run_id, offsets = run.run_id, run.offsets
        what = f"{coll}/{algo} on {len(placement)} ranks"
        shown = progress.bar(what, len(programs), "sizes") if cfg.progress else nullcontext()
        with shown as bar:

            def on_batch(program, batch) -> None:
                run.add_instances(program.spec, batch, streams=cfg.streams)

            def on_size(row) -> None:
                rows.append(row)
                if bar is not None:
                    bar.advance()
                    bar.describe(f"{coll}/{algo} {format_bytes(row.size)} done")

            with contextlib.ExitStack() as undo:
                sched = None
                if fault_plan is not None:
                    clock = run.ctl.clock.now
                    sched = undo.enter_context(
                        _faults.scheduler(fault_plan, clock, cfg.testbed_path)
                    )
                sweep(
                    run.ctl,
                    programs,
                    placement,
                    iters=cfg.iters,
                    warmup=cfg.warmup,
                    options=opts,
                    topology=topology,
                    on_size=on_size,
                    on_instances=on_batch if run.store else None,
                    calibrated=calibrated,
                    model_placement=tb.rank_endpoints(placement),
                    on_start=sched.start if sched else None,
                )
            if sched is not None:
                cfg.fault_doc = fault_doc(sched.records(), sched.start_at_ns, rows)
                run.update_meta(faults=cfg.fault_doc)
    if k != 1 and topology is not None:
        cfg.notes.append(_dilation_note(programs, placement, calibrated or topology, k, cal, tb))
    return run_id, [dilate(r, k) for r in rows] if k != 1 else rows, offsets


def fault_doc(records: dict, origin_ns: int | None, rows) -> dict:
    """The faults as applied with, per size, the measured iterations that overlapped a fault
    vs those that overlapped none (p50 each; seconds from ``FAULT_ORIGIN``)."""
    from genie.faults.effect import fault_effect, fault_windows

    if origin_ns is None:  # the sweep ended before its first measured Go
        return {**records, "time_origin": FAULT_ORIGIN, "run_end_s": 0.0, "by_size": []}
    per_size = [
        (
            r.size,
            [
                {"start_s": (x.start_ns - origin_ns) / 1e9, "makespan_s": x.time_s}
                for x in r.instances
                if not x.warmup
            ],
        )
        for r in rows
    ]
    end = max((x["start_s"] + x["makespan_s"] for _, xs in per_size for x in xs), default=0.0)
    windows = fault_windows(records, end)
    by_size = [{"size": size, **fault_effect(xs, windows)} for size, xs in per_size]
    return {**records, "time_origin": FAULT_ORIGIN, "run_end_s": end, "by_size": by_size}


def print_fault_effect(doc: dict, file=None) -> None:
    """The faults as applied, then per size the p50 with and without a fault overlapping."""
    from rich.console import Console

    from genie.commands._faults import print_applied
    from genie.units import format_bytes, format_seconds

    def p50(t: float | None) -> str:
        return "-" if t is None else format_seconds(t)

    out = file or sys.stdout
    con = Console(file=out, highlight=False, width=None if out.isatty() else 160)
    print_applied(con, doc, FAULT_ORIGIN)
    con.print("fault effect per size (p50 of the measured iterations, measured on the wire):")
    for s in doc["by_size"]:
        ratio = s["fault_vs_clean"]
        con.print(
            f"  {format_bytes(s['size'])}: {s['clean_runs']} iterations overlapping no fault, "
            f"p50 {p50(s['clean_median_s'])}; {s['fault_runs']} overlapping a fault, p50 "
            f"{p50(s['fault_median_s'])}" + (f" ({ratio:.2f}x)" if ratio is not None else ""),
            markup=False,
        )
        for e in s["events"]:
            if e["runs"]:
                con.print(
                    f"    '{e['label']}' ({format_seconds(e['from_s'])} to "
                    f"{format_seconds(e['to_s'])}): {e['runs']} iteration(s), p50 "
                    f"{p50(e['median_s'])}",
                    markup=False,
                )


def _dilation_note(programs, placement, lab, k: float, cal, tb) -> str:
    """What dilation by ``k`` did not scale, and how much that matters per size (model)."""
    from genie.calibration.dilation import dilation_note, kept_latency
    from genie.collectives.cost import nccl_size
    from genie.units import format_bytes

    items = [
        (p.spec.collective, nccl_size(p), p, placement[: p.n_ranks])
        for p in programs
        if p.n_ranks <= len(placement)
    ]
    try:
        effects = kept_latency(items, lab, k)
    except GenieError as exc:
        return f"dilation x{k:g}: the model cannot price what does not scale ({exc})"
    model = cal.label if cal else f"nominal, {tb.model_source}"
    pick = effects if len(effects) <= 4 else [effects[0], effects[len(effects) // 2], effects[-1]]
    return dilation_note(k, lab, model, [(format_bytes(e.size), e.pct) for e in pick])


def dilate(row, k: float):
    """A sweep row as on a fabric ``k`` times faster: every time / k, bandwidths x k."""
    import dataclasses

    def div(t):
        return None if t is None else t / k

    st = row.stats
    stats = msgspec.structs.replace(
        st, p50=st.p50 / k, p99=st.p99 / k, min=st.min / k, max=st.max / k, mean=st.mean / k
    )
    return dataclasses.replace(
        row,
        stats=stats,
        algbw=row.algbw * k,
        busbw=row.busbw * k,
        modeled_s=div(row.modeled_s),
        calibrated_s=div(row.calibrated_s),
    )


def _us(t: float | None) -> str:
    return "-" if t is None or not math.isfinite(t) else f"{t * 1e6:.1f}"


def print_table(
    rows, title: str, iters: int, warmup: int, file=None, model: str = "its testbed's rates"
) -> None:
    """The nccl-tests-like table (rich); ``model`` says which fabric the model column priced."""
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=title,
        caption=f"time = p50 of {iters} iterations after {warmup} warm-up; "
        f"times in us; GB/s = 10^9 bytes/s;\nmodel = genie cost model (ring/direct step programs, "
        f"fair link sharing) of {model}",
        header_style="bold",
    )
    for col in (
        "size (B)",
        "count",
        "type",
        "time p50",
        "algbw GB/s",
        "busbw GB/s",
        "p99",
        "min",
        "max",
        "model",
        "meas/model",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        ratio = r.ratio
        t.add_row(
            str(r.size),
            str(r.count),
            r.dtype,
            _us(r.stats.p50),
            f"{r.algbw / 1e9:.3f}",
            f"{r.busbw / 1e9:.3f}",
            _us(r.stats.p99),
            _us(r.stats.min),
            _us(r.stats.max),
            _us(r.modeled_s),
            "-" if ratio is None else f"{ratio:.2f}",
        )
    out = file or sys.stdout
    width = None if out.isatty() else 160  # never truncate columns when piped
    Console(file=out, highlight=False, width=width).print(t)


def rows_json(rows) -> list[dict]:
    """Rows as JSON-ready dicts (bytes, seconds, bytes/s)."""
    return [
        {
            "size": r.size,
            "count": r.count,
            "type": r.dtype,
            "n_ranks": r.n_ranks,
            "time_p50_s": r.stats.p50,
            "time_p99_s": r.stats.p99,
            "time_min_s": r.stats.min,
            "time_max_s": r.stats.max,
            "iterations": r.stats.n,
            "algbw_Bps": r.algbw,
            "busbw_Bps": r.busbw,
            "modeled_s": r.modeled_s,
            "measured_over_modeled": r.ratio,
            "calibrated_s": r.calibrated_s,
            "nominal_error_pct": error_pct(r.modeled_s, r.stats.p50),
            "calibrated_error_pct": error_pct(r.calibrated_s, r.stats.p50),
        }
        for r in rows
    ]


def error_rows(rows, collective: str) -> list:
    """The sweep's rows as model-error rows (measured p50 vs nominal vs calibrated)."""
    from genie.calibration.accuracy import ErrorRow

    return [
        ErrorRow(f"{collective} n={r.n_ranks}", r.size, r.stats.p50, r.modeled_s, r.calibrated_s)
        for r in rows
    ]


def print_model_error(rows, cfg: BenchConfig, model: str, file=None) -> None:
    """The model-error table of a sweep and the run's notes (dilation)."""
    from rich.console import Console

    from genie.commands._model_error import print_error_table

    out = file or sys.stdout
    con = Console(file=out, highlight=False, width=None if out.isatty() else 160)
    print_error_table(
        con,
        "model error per size",
        error_rows(rows, cfg.collective),
        model,
        cfg.calibration_used,
        "not asked for (--calibration none)"
        if cfg.calibration in (None, "none")
        else "no calibration of this testbed in the run store (genie calibrate RUN)",
    )
    for note in cfg.notes:
        con.print(note, markup=False)


def _run(args: argparse.Namespace) -> int:
    from genie.controller.session import Timeouts

    cfg = BenchConfig(
        testbed_path=args.testbed,
        collective=args.collective,
        algorithm=args.algo,
        sizes=args.sizes,
        iters=args.iters,
        warmup=args.warmup,
        ranks=args.ranks,
        placement=args.placement,
        chunks=args.chunks,
        streams=args.streams,
        sndbuf=args.sndbuf,
        rcvbuf=args.rcvbuf,
        verify=not args.no_verify,
        transport=args.transport,
        store=None if args.no_store else args.store,
        command="genie " + " ".join(sys.argv[1:]),
        progress=True,  # genie.progress draws it only on a terminal, never with -q
        timeouts=Timeouts(slow_rate=args.slow_rate, margin=args.timeout_margin),
        calibration=args.calibration,
        dilation=args.dilation,
        faults=args.faults,
    )
    if not Path(cfg.testbed_path).is_file():
        raise UsageError(f"testbed file not found: {cfg.testbed_path}")
    from genie.testbed import load_testbed

    run_id, rows, offsets = run_bench(cfg)
    cal = cfg.calibration_used
    if args.json:
        json.dump(
            {
                "run_id": run_id,
                "collective": cfg.collective,
                "algorithm": cfg.algorithm,
                "units": {"time": "s", "bandwidth": "bytes/s", "size": "bytes"},
                "model": "genie cost model of "
                + load_testbed(cfg.testbed_path).with_flows(cfg.streams).model_note(),
                "streams": cfg.streams,
                "calibration": cal.cal_id if cal else None,
                "calibrated_model": cal.describe() if cal else None,
                "dilation": cfg.dilation,
                "notes": cfg.notes,
                "clock_offsets": {a: msgspec.to_builtins(e) for a, e in offsets.items()},
                "rows": rows_json(rows),
                **({"faults": cfg.fault_doc} if cfg.fault_doc is not None else {}),
            },
            sys.stdout,
            indent=2,
        )
        print()
    else:
        title = f"genie bench: {cfg.collective}/{cfg.algorithm} on {args.testbed}"
        from genie.testbed import load_testbed

        model = load_testbed(cfg.testbed_path).with_flows(cfg.streams).model_note()
        if cfg.dilation != 1:
            title += f", dilated x{cfg.dilation:g} (times / {cfg.dilation:g})"
        print_table(rows, title, cfg.iters, cfg.warmup, model=model)
        print_model_error(rows, cfg, model)
        if cfg.fault_doc is not None:
            print_fault_effect(cfg.fault_doc)
        if run_id:
            print(f"stored as run {run_id} in {cfg.store}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command."""
    p = sub.add_parser(
        "bench",
        help="measure a collective over sizes on a live testbed (nccl-tests style)",
        description="Run a collective on the testbed's agents for each size and print "
        "nccl-tests columns plus the cost model's time. GB/s = 10^9 bytes/s.",
    )
    p.add_argument("--testbed", required=True, metavar="FILE", help="testbed TOML file")
    p.add_argument("--collective", default="all_reduce", help="collective (default all_reduce)")
    p.add_argument("--algo", default=None, help="algorithm (default: the collective's default)")
    p.add_argument(
        "--sizes",
        type=A.sweep,
        default="1KiB:16MiB:x4",
        help="MIN:MAX:xF, MIN:MAX:+S or A,B,C (bytes; at most 10000 sizes)",
    )
    p.add_argument(
        "--iters", type=A.integer(1, 10**6), default=20, help="measured iterations per size"
    )
    p.add_argument(
        "--warmup", type=A.integer(0, 10**5), default=5, help="warm-up iterations per size"
    )
    p.add_argument(
        "--ranks", type=A.integer(1, 1 << 16), default=None, help="ranks (default: the testbed's)"
    )
    p.add_argument("--placement", default="testbed", choices=["testbed", "round-robin"])
    p.add_argument(
        "--chunks", type=A.integer(1, 1024), default=1, help="pipeline chunks per collective"
    )
    A.add_streams(p)
    p.add_argument(
        "--sndbuf", type=A.size(0, 1 << 30), default="0", help="SO_SNDBUF (0 = kernel autotuning)"
    )
    p.add_argument(
        "--rcvbuf", type=A.size(0, 1 << 30), default="0", help="SO_RCVBUF (0 = kernel autotuning)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip per-message CRC checks")
    p.add_argument(
        "--transport",
        choices=["tcp", "rdma"],
        default=None,
        help="data plane (default: the testbed file's transport, tcp if unset)",
    )
    p.add_argument(
        "--slow-rate",
        type=A.bandwidth,
        default="160mbit",
        help="slowest rate assumed when bounding waits",
    )
    p.add_argument(
        "--timeout-margin", type=A.real(0, 1000), default=4.0, help="margin on that bound"
    )
    add_dilation_argument(p, "every time reported / K and bandwidths x K")
    add_calibration_argument(p, "latest")
    add_faults_argument(p, FAULT_ORIGIN)
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument("--no-store", action="store_true", help="do not record the run")
    p.set_defaults(func=_run)
