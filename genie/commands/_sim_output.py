"""What ``genie simulate`` and ``genie emulate`` print: replay reports as tables, or as JSON.

``print_reports`` writes the iteration summary per backend, the per-rank breakdown and the
per-collective tables (with the textbook closed form beside each row where the network is
one the closed forms describe); ``dump_json`` writes a document with NaN and infinities as
null. Closed forms come from ``genie.vocabulary``; ``closed`` describes the network they assume
(bandwidth, latency per message, the algorithms the pricer used, chunks).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from genie.commands._json_text import indented
from genie.sim.closed import ClosedForm, closed_for
from genie.sim.compiled import CompiledWorkload
from genie.sim.report import SimReport
from genie.units import format_bytes, format_seconds

if TYPE_CHECKING:  # rich loads only when a table is printed (--json needs none)
    from rich.console import Console

# One word per meaning: "blocked" is the breakdown's part (a collective ready on a rank but not
# started, its peers not arrived or it queued behind its stream, with nothing else running);
# "waited for peers" is the stragglers' count (time at collectives until the last rank arrived).
BLOCKED = "blocked"
BLOCKED_CAPTION = (
    "blocked: a collective ready, not started (peers late, or queued behind its stream)"
)


def _plain(o: Any) -> Any:
    """A numpy scalar as its Python number; anything else unknown to JSON as a string."""
    item = getattr(o, "item", None)
    return item() if isinstance(o, np.generic) and item is not None else str(o)


def dump_json(doc: Any) -> None:
    """Write ``doc`` as JSON on stdout (NaN/inf as null, unknown objects as strings).

    msgspec's encoder (NaN and infinities become null there too) is ~15x faster than json's
    with an indent, which a report of thousands of collectives notices; its long lists are
    formatted and written a chunk at a time (``genie.commands._json_text``): the same bytes,
    without the whole text in memory.
    """
    pieces = indented(doc, enc_hook=_plain)
    out = sys.stdout
    buf = getattr(out, "buffer", None)
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
    if buf is None or encoding != "utf8" or os.linesep != "\n":
        out.write(b"".join(pieces).decode() + "\n")
        return
    # the bytes a UTF-8 text stream would write, without decoding tens of MB and encoding
    # them again (after what the text layer holds, so the order stays)
    out.flush()
    for piece in pieces:
        buf.write(piece)
    buf.write(b"\n")
    buf.flush()


def print_ranks(con: Console, rep: SimReport, limit: int = 16) -> None:
    """Per-rank breakdown: every rank when few, else the extremes of waiting and comm."""
    from rich.table import Table

    ranks = rep.ranks
    if len(ranks) > limit:
        by_wait = sorted(ranks, key=lambda b: (b.wait, b.rank))
        by_comm = sorted(ranks, key=lambda b: (b.exposed_comm, b.rank))
        pick = {b.rank: b for b in (by_wait[0], by_wait[-1], by_comm[0], by_comm[-1])}
        ranks = [pick[k] for k in sorted(pick)]
        title = f"ranks over {rep.backend}: least/most waiting and exposed comm of {rep.n_ranks}"
    else:
        title = f"ranks over {rep.backend}"
    if rep.symmetric:
        title += " (all ranks identical)"
        ranks = ranks[:1]
    t = Table(title=title, title_justify="left")
    for c in ("rank", "compute", "exposed comm", BLOCKED, "idle", "finish"):
        t.add_column(c, justify="right")
    for b in ranks:
        t.add_row(
            str(b.rank),
            format_seconds(b.compute),
            format_seconds(b.exposed_comm),
            format_seconds(b.wait),
            format_seconds(b.idle),
            format_seconds(b.finish),
        )
    con.print(t)


def _shares(d: dict, iteration: float) -> str:
    parts = [f"{k} {format_seconds(v)} ({v / iteration:.0%})" for k, v in d.items() if v > 0]
    return ", ".join(parts) or "-"


def print_where(con: Console, reports: list[SimReport]) -> None:
    """Exposed communication by parallelism dimension and collective; the busiest links."""
    from rich.table import Table

    t = Table(
        title="where the exposed communication goes (per-rank means; shares of the iteration)",
        title_justify="left",
    )
    t.add_column("backend")
    t.add_column("by dimension")
    t.add_column("by collective")
    for r in reports:
        it = r.iteration_s or 1.0
        t.add_row(
            r.backend, _shares(r.exposed_by_dimension, it), _shares(r.exposed_by_collective, it)
        )
    con.print(t)
    for r in reports:
        if not r.links:
            continue
        lt = Table(
            title=f"busiest links over {r.backend} (bottleneck: saturated, setting the pace)",
            title_justify="left",
        )
        for c in ("link", "bytes", "capacity", "utilisation", "bottleneck"):
            lt.add_column(c, justify="left" if c == "link" else "right")
        for x in r.links:
            lt.add_row(
                x["link"],
                format_bytes(x["bytes"]),
                f"{x['capacity_Bps'] / 1e9:.2f} GB/s",
                f"{x['utilisation']:.0%}",
                f"{x['bottleneck_share']:.0%} of the iteration",
            )
        con.print(lt)


def print_stragglers(con: Console, reports: list[SimReport], limit: int = 16) -> None:
    """What the slowest ranks cost: the iteration against no stragglers, who waited on whom."""
    from rich.table import Table

    for r in reports:
        s = r.stragglers
        if not s:
            continue
        con.print(
            f"[bold]stragglers[/] over {r.backend} ({s['described']}): iteration "
            f"{format_seconds(s['iteration_s'])} against {format_seconds(s['baseline_s'])} "
            f"without them, {format_seconds(s['cost_s'])} ({s['cost_share']:+.1%}) longer"
        )
        rows = sorted(s["by_rank"], key=lambda x: (-x["wait_s"], x["rank"]))
        t = Table(
            title=f"waited for peers at collectives, by rank, over {r.backend} (charged to the "
            "last rank to arrive)"
            + (f"; the {limit} that waited most" if len(rows) > limit else ""),
            title_justify="left",
        )
        for c in (
            "rank",
            "waited for peers",
            "of the iteration",
            "waited most on",
            "made others wait",
        ):
            t.add_column(c, justify="right")
        for x in rows[:limit]:
            t.add_row(
                str(x["rank"]),
                format_seconds(x["wait_s"]),
                f"{x['share']:.1%}",
                "-" if x["waited_most_on"] is None else f"rank {x['waited_most_on']}",
                format_seconds(x["made_others_wait_s"]),
            )
        con.print(t)
        if s["pairs"]:
            pairs = ", ".join(
                f"{p['waiter']} on {p['waited_on']} {format_seconds(p['wait_s'])}"
                for p in s["pairs"][:6]
            )
            con.print(f"who waited on whom (heaviest): {pairs}")


def print_summary(
    con: Console, cw: CompiledWorkload, network: str, reports: list[SimReport]
) -> None:
    """The workload, the network and the iteration's breakdown per backend."""
    from rich.table import Table

    con.print(
        f"[bold]workload[/] {cw.name}: {cw.n_ranks} ranks, {cw.n_nodes} nodes, "
        f"{len(cw.instances)} communication instances"
    )
    con.print(f"[bold]network[/]  {network}")
    summary = Table(
        title="iteration (per-rank means)", title_justify="left", caption=BLOCKED_CAPTION
    )
    summary.caption_justify = "left"
    for col in ("backend", "iteration", "compute", "exposed comm", BLOCKED, "idle", "replay"):
        summary.add_column(col, justify="right" if col != "backend" else "left")
    for r in reports:
        summary.add_row(
            r.backend,
            format_seconds(r.iteration_s),
            format_seconds(r.mean("compute")),
            format_seconds(r.mean("exposed_comm")),
            format_seconds(r.mean("wait")),
            format_seconds(r.mean("idle")),
            format_seconds(r.wall_s) + (" (sym)" if r.symmetric else ""),
        )
    con.print(summary)


def print_reports(
    con: Console,
    cw: CompiledWorkload,
    network: str,
    reports: list[SimReport],
    closed: ClosedForm | None,
    rows: int,
) -> None:
    """The summary, per-rank and per-collective tables of one or more replays."""
    from rich.table import Table

    print_summary(con, cw, network, reports)
    for r in reports:
        print_ranks(con, r)
    print_stragglers(con, reports)
    print_where(con, reports)
    for r in reports:
        t = Table(
            title=f"collectives over {r.backend} (algbw/busbw in GB/s = 10^9 B/s)",
            title_justify="left",
        )
        cols = ["#", "collective", "group", "n", "size", "start", "end", "arrival skew", "time"]
        cols += ["algbw", "busbw"]
        if closed is not None:
            cols += ["closed form", "ratio"]
        for c in cols:
            t.add_column(c, justify="left" if c in ("collective", "group") else "right")
        for row in r.collectives[:rows]:
            cells = [
                str(row.seq),
                row.collective + ("_v" if row.uneven is not None else ""),
                row.group,
                str(row.ranks),
                format_bytes(row.size),
                format_seconds(row.start),
                format_seconds(row.end),
                format_seconds(row.start - row.first_arrival),
                format_seconds(row.time),
                f"{row.algbw_gbps:.2f}",
                f"{row.busbw_gbps:.2f}",
            ]
            if closed is not None:
                cf = closed_for({**row.__dict__}, closed)
                cells += [
                    format_seconds(cf) if cf is not None else "-",
                    f"{row.time / cf:.4f}" if cf else "-",
                ]
            t.add_row(*cells)
        con.print(t)
        if len(r.collectives) > rows:
            con.print(f"... {len(r.collectives) - rows} more instances (--rows, --json)")
        uneven = [x for x in r.collectives if x.uneven is not None]
        if uneven:
            worst = max(uneven, key=lambda x: x.uneven or 0.0)
            con.print(
                f"all_to_all_v: {len(uneven)} uneven all-to-alls (per-peer sizes), priced by "
                f"their per-peer bytes; most skewed #{worst.seq}: largest block "
                f"{worst.uneven:.1f}x the mean"
            )
        if (
            closed is not None
            and len(r.collectives) == 1
            and r.collectives[0].collective != "send_recv"
        ):
            row = r.collectives[0]
            cf = closed_for({**row.__dict__}, closed)
            if cf:
                con.print(
                    f"{row.collective} of {row.size} B on {row.ranks} ranks: {r.backend} "
                    f"{row.time * 1e6:.4f} us, closed form {closed.formula(row.collective)}"
                    f"{cf * 1e6:.4f} us (alpha {closed.latency * 1e9:.0f} ns per message, B "
                    f"{closed.bandwidth / 2**30:.3f} GiB/s), ratio {row.time / cf:.6f}"
                )
        for note in r.notes:
            con.print(f"note ({r.backend}): {note}")
