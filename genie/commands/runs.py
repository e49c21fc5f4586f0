"""``genie runs list|show|export|compare``: read the run store (see ``genie.store``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING

from genie.commands import _args as A
from genie.errors import StoreError
from genie.store import DEFAULT_STORE, RunStore
from genie.wire.conditions import conditions_of, flatten

if TYPE_CHECKING:
    from genie.api.runs import RunComparison


def _open(args: argparse.Namespace) -> RunStore:
    from genie.api.runs import open_store

    return open_store(args.store)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    problems: list[str] = []
    with _open(args) as st:
        runs = st.list_runs(args.limit, problems=problems)
    for line in problems:  # a corrupt row is left out, with one line saying which and why
        print(f"genie: warning: {line} (left out)", file=sys.stderr)
    if args.json:
        print(json.dumps([{k: getattr(r, k) for k in _LIST_KEYS} for r in runs], indent=2))
        return 0
    con = Console()
    t = Table(title=f"runs in {args.store} (times UTC; a unique prefix of a run id works too)")
    rows = [  # every cell as text: a corrupt row's None or number never breaks the table
        tuple(
            "-" if v is None else str(v)
            for v in (
                r.run_id,
                _when(r.created_at),
                r.status,
                r.testbed_name,
                r.instances,
                r.command,
            )
        )
        for r in runs
    ]
    heads = ("run", "started", "status", "testbed", "instances")
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(heads)]
    for head, w in zip(heads, widths, strict=True):  # the id `report` needs is never cut
        t.add_column(head, no_wrap=True, min_width=w)
    fixed = sum(widths) + 3 * len(widths) + 4  # columns, borders and padding
    room = max(30, con.width - fixed)
    t.add_column("command", no_wrap=True, overflow="ellipsis", max_width=room)
    con = Console(width=max(con.width, fixed + room))  # too narrow: lines wrap, nothing is cut
    for row in rows:
        t.add_row(*row)
    con.print(t)
    return 0


_LIST_KEYS = ("run_id", "created_at", "finished_at", "status", "testbed_name", "instances")


def _show(args: argparse.Namespace) -> int:
    from genie.calibration.dilation import reported_s, run_dilation
    from genie.controller.results import stats
    from genie.report.counters import group_counters

    with _open(args) as st:
        info = st.run(args.run)
        dk = run_dilation(info.meta)  # a dilated run reads as bench/emulate printed it: / K
        groups: dict[tuple[str, str, int, int], list[float]] = {}
        for x in st.instances(info.run_id):
            key = (x["collective"], x["algorithm"], x["n_ranks"], x["size"])
            groups.setdefault(key, []).append(reported_s(x["time_s"], dk))
        counters = group_counters(st.counters(info.run_id))
    summary = [
        {
            "collective": c,
            "algorithm": a,
            "n_ranks": n,
            "size": s,
            "n": len(ts),
            "p50_s": stats(ts).p50,
            "p99_s": stats(ts).p99,
        }
        for (c, a, n, s), ts in sorted(groups.items())
    ]
    if args.json:
        out = {k: getattr(info, k) for k in info.__struct_fields__}
        out["summary"] = summary
        if counters:
            out["counters"] = [g.to_dict() for g in counters]
        print(json.dumps(out, indent=2))
        return 0
    print(f"run {info.run_id}: {info.status}" + (f" ({info.error})" if info.error else ""))
    print(f"  started {_when(info.created_at)} UTC, finished {_when(info.finished_at)} UTC")
    print(f"  command: {info.command}")
    print(f"  genie {info.genie_version}; testbed {info.testbed_name or '-'}", end="")
    print(f" ({len(info.testbed)} bytes of testbed file kept)")
    if info.workload_hash:
        print(f"  workload hash {info.workload_hash}")
    for a, f in sorted(info.host_facts.items()):
        off = info.clock_offsets.get(a, {})
        print(
            f"  host {a}: {f.get('hostname', '?')}, {f.get('cpus_logical', '?')} CPUs; "
            f"clock offset {off.get('offset_ns', '?')} ns"
        )
    cond = flatten(conditions_of(info.meta))
    if cond:
        print("  conditions (read back from the agents' data connections):")
        for name, value in cond.items():
            print(f"    {name}: {value}")
    dil = f" (dilation x{dk:g}: the wire's times / {dk:g})" if dk != 1 else ""
    print(f"  {info.instances} instances (warm-up included); measured, per size{dil}:")
    for (c, a, n, size), ts in sorted(groups.items()):
        t = stats(ts)
        print(
            f"    {c}/{a} n={n} size={size} B:"
            f" {len(ts)} x, p50 {t.p50 * 1e6:.1f} us, p99 {t.p99 * 1e6:.1f} us"
        )
    if counters:
        _show_counters(counters)
    return 0


def _show_counters(counters: list) -> None:
    """The NIC and stack counters' lines of ``runs show``: where they were read, then per
    size or iteration what moved (or one line saying nothing did)."""
    from genie.report.counters import group_lines, sources_line

    trace = any(g.iteration is not None for g in counters)
    what = " (of the trace, from 0, warm-up first)" if trace else ""
    print(
        f"  counters (NIC and stack, deltas per size or iteration{what}; "
        f"read {sources_line(counters)}):"
    )
    if any(g.samples for g in counters):
        print("    (Goes that ran long were sampled as they went: --json has how counters grew)")
    lines = group_lines(counters)
    for line in lines:
        print(f"    {line}")
    if not lines:
        print("    nothing moved: no CNP, ECN mark, pause, retransmit, timeout or error counted")


def _compare(args: argparse.Namespace) -> int:
    """Handle ``genie runs compare``: ``genie.api.compare_runs`` -> render."""
    from genie.api.runs import compare_runs

    cmp = compare_runs(args.run_a, args.run_b, store=args.store)
    if args.json:
        print(json.dumps(cmp.to_dict(), indent=2))
        return 0
    render_comparison(cmp)
    return 0


def render_comparison(cmp: RunComparison) -> None:
    """Print two runs side by side: what each is, then the p50 table."""
    from rich.console import Console
    from rich.table import Table

    from genie.units import format_bytes, format_seconds

    con = Console(highlight=False)
    for tag, r in (("A", cmp.a), ("B", cmp.b)):
        dil = r.meta.get("dilation") or 1
        extra = f", dilation x{dil:g} (times stored undilated)" if dil != 1 else ""
        con.print(f"{tag} = {r.run_id}: testbed {r.testbed_name}{extra}: {r.command}", markup=False)
    t = Table(title="measured p50 side by side (warm-up left out)", title_justify="left")
    for c in ("collective", "ranks", "size", "A p50", "B p50", "B/A", "B vs A"):
        t.add_column(c, justify="left" if c == "collective" else "right")
    for row in cmp.rows:
        t.add_row(
            f"{row.collective}/{row.algorithm}",
            str(row.n_ranks),
            format_bytes(row.size),
            "-" if row.a_p50_s is None else format_seconds(row.a_p50_s),
            "-" if row.b_p50_s is None else format_seconds(row.b_p50_s),
            "-" if row.b_over_a is None else f"{row.b_over_a:.3f}",
            "-" if row.b_vs_a_pct is None else f"{row.b_vs_a_pct:+.1f} %",
        )
    con.print(t)
    diff = cmp.conditions_differ()
    if diff:
        con.print("conditions that differ (A vs B):", markup=False)
        for d in diff:
            con.print(f"  {d}", markup=False)
    elif conditions_of(cmp.a.meta) and conditions_of(cmp.b.meta):
        con.print("conditions: the same in both runs", markup=False)
    if cmp.counters:
        _compare_counters(con, cmp.counters)
    only = [r for r in cmp.rows if r.b_over_a is None]
    if only:
        con.print(f"{len(only)} size(s) measured by one run only (-)", markup=False)


def _compare_counters(con, rows: list[dict]) -> None:
    """The NIC and stack counters of both runs, per iteration (summed over agents)."""
    from rich.table import Table

    t = Table(
        title="NIC and stack counters per iteration, summed over agents", title_justify="left"
    )
    for c in ("size or iteration", "counter", "A", "B"):
        t.add_column(c, justify="left" if c != "A" and c != "B" else "right")
    for r in rows:
        a, b = r["a_per_iteration"], r["b_per_iteration"]
        t.add_row(
            str(r["what"]),
            str(r["counter"]),
            "-" if a is None else f"{a:,.1f}",
            "-" if b is None else f"{b:,.1f}",
        )
    con.print(t)


def _export(args: argparse.Namespace) -> int:
    from genie.store import export_rows, write_csv, write_parquet

    with _open(args) as st:
        rows = export_rows(st, args.run, include_warmup=not args.no_warmup)
    if args.parquet:
        n = write_parquet(rows, args.parquet)
        print(f"wrote {n} rows to {args.parquet}", file=sys.stderr)
        return 0
    target = args.csv
    if target == "-":
        write_csv(rows, sys.stdout)
        return 0
    try:
        with open(target, "w", newline="") as fh:
            n = write_csv(rows, fh)
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from None
    print(f"wrote {n} rows to {target}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``runs`` command."""
    p = sub.add_parser("runs", help="list, show, compare and export recorded runs")
    rs = p.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store")

    ls = rs.add_parser("list", help="runs, newest first")
    common(ls)
    ls.add_argument(
        "--limit", type=A.integer(1, 1000000000), default=None, help="at most this many"
    )
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    sh = rs.add_parser("show", help="one run: provenance and per-size summary")
    common(sh)
    sh.add_argument("run", help="run id (a unique prefix is enough)")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(func=_show)

    cp = rs.add_parser("compare", help="two runs side by side: same collectives and sizes")
    common(cp)
    cp.add_argument("run_a", metavar="RUN_A", help="first run (a unique id prefix works)")
    cp.add_argument("run_b", metavar="RUN_B", help="second run")
    cp.add_argument("--json", action="store_true", help="print JSON")
    cp.set_defaults(func=_compare)

    ex = rs.add_parser("export", help="a run's instances as CSV or Parquet")
    common(ex)
    ex.add_argument("run", help="run id (a unique prefix is enough)")
    fmt = ex.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", metavar="FILE", help="CSV file ('-' for stdout)")
    fmt.add_argument("--parquet", metavar="FILE", help="Parquet file (needs pyarrow)")
    ex.add_argument("--no-warmup", action="store_true", help="leave warm-up instances out")
    ex.set_defaults(func=_export)
