"""What ``genie workload inspect`` prints: a workload's summary at a glance."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from genie.units import format_bytes, format_seconds
from genie.workload.stream_rules import edge_lines
from genie.workload.summary import reading_notes


def render_summary(s: dict) -> None:
    """The summary of ``genie.workload.summarize`` as text on stdout."""
    con = Console()
    con.print(
        f"[bold]{s['name'] or 'workload'}[/]: {s['ranks']} ranks, {s['nodes']} nodes "
        f"({', '.join(f'{k} {v}' for k, v in s['nodes_by_kind'].items() if v)})"
    )
    if s["collectives"]:
        t = Table(title="Collectives (all ranks)")
        for col in ("type", "comm_size (bytes)", "MiB (2^20 B)", "group", "nodes"):
            t.add_column(col, justify="right" if col != "type" else "left")
        for c in s["collectives"]:
            pg = c["pg_name"]
            desc = s["group_desc"].get(pg)
            t.add_row(
                c["type"],
                str(c["comm_size_bytes"]),
                f"{c['comm_size_MiB']:.3f}",
                (f"{pg} ({desc})" if desc else pg) or "<default>",
                str(c["nodes"]),
            )
        con.print(t)
    con.print(
        f"collective bytes {format_bytes(s['collective_bytes'])}, "
        f"send bytes {format_bytes(s['send_bytes'])}"
    )
    con.print(
        f"compute time: {format_seconds(s['compute_s_total'])} total over ranks, "
        f"{format_seconds(s['compute_s_max_rank'])} on the busiest rank"
    )
    con.print(
        f"critical path: {format_seconds(s['critical_path_s'])} ([dim]{s['critical_path_note']}[/])"
    )
    named = {k: v for k, v in s["groups"].items() if k != "<default>"}
    if named:
        con.print(f"process groups: {len(named)} named besides the default group of all ranks")
    for line in reading_notes(s["dropped"], s["nodes_by_kind"].get("host", 0)):
        con.print(line, markup=False, highlight=False)
    for line in edge_lines(s.get("stream_rules") or {}):
        con.print(line, markup=False, highlight=False)
    if s["astra_sim"]:
        con.print("ASTRA-sim 2.0 would not run these files as they are:")
        for line in s["astra_sim"]:
            con.print(f"  - {line}", markup=False, highlight=False)
    else:
        con.print("ASTRA-sim 2.0: runs these files as they are (genie.workload.astra)")
    if s["problems"]:
        con.print(f"[yellow]problems ({len(s['problems'])}):[/]")
        for p in s["problems"][:50]:
            con.print(f"  - {p}", markup=False, highlight=False)
        if len(s["problems"]) > 50:
            con.print(f"  ... and {len(s['problems']) - 50} more (see --json)")
    else:
        con.print("problems: none (collective sequences match across each group's ranks)")
