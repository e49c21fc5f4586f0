"""Tables of the NCCL-like model's choices: per collective shape (simulate) and per size (nccl)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from genie.collectives.nccl_model import Prediction
from genie.units import format_bytes, format_seconds


def print_choices(con: Console, choices: Sequence[dict[str, object]], rows: int = 20) -> None:
    """``genie simulate --collective-model nccl``: what NCCL's rule chose per collective shape."""
    t = Table(
        title="NCCL-like model: algorithm and protocol per collective (size as in the trace)",
        title_justify="left",
    )
    for c in ("collective", "ranks", "nodes", "size", "algorithm", "protocol", "channels"):
        t.add_column(c, justify="left" if c in ("collective", "algorithm", "protocol") else "right")
    t.add_column("latency", justify="right")
    t.add_column("time alone", justify="right")
    t.add_column("runner-up", justify="left")
    for ch in choices[:rows]:
        t.add_row(
            str(ch["collective"]),
            str(ch["ranks"]),
            str(ch["nodes"]),
            format_bytes(float(str(ch["size"]))),
            str(ch["algorithm"]),
            str(ch["protocol"]),
            str(ch["channels"]),
            format_seconds(float(str(ch["latency_s"]))),
            format_seconds(float(str(ch["time_s"]))),
            _next(ch),
        )
    con.print(t)
    if len(choices) > rows:
        con.print(f"... {len(choices) - rows} more collective shapes (--rows, --json)")
    for ch in choices:
        if ch.get("note"):
            con.print(f"note (nccl): {ch['collective']} on {ch['ranks']} ranks: {ch['note']}")


def _next(ch: dict[str, object]) -> str:
    """``ring/LL128 +12%``: the candidate ranked next and its time against the chosen one's (a
    Simple ring's flag waits, which NCCL's tuner does not price, can make it the faster)."""
    if ch.get("runner_up") is None:
        return "-"
    t, r = float(str(ch["time_s"])), float(str(ch["runner_up_time_s"]))
    return f"{ch['runner_up']} {(r / t - 1) * 100:+.0f}%" if t > 0 else str(ch["runner_up"])


def print_sizes(
    con: Console, title: str, preds: Sequence[Sequence[Prediction]], every: bool
) -> None:
    """``genie nccl``: per size the choice (and with ``every``, each candidate)."""
    t = Table(title=title, title_justify="left")
    cols = [
        "size",
        "algorithm",
        "protocol",
        "channels",
        "latency",
        "time",
        "algbw GB/s",
        "busbw GB/s",
    ]
    for c in cols:
        t.add_column(c, justify="left" if c in ("algorithm", "protocol") else "right")
    for cands in preds:
        for i, p in enumerate(cands if every else cands[:1]):
            t.add_row(
                format_bytes(p.size) if i == 0 else "",
                p.algorithm + (" *" if every and i == 0 else ""),
                p.protocol,
                str(p.channels),
                format_seconds(p.latency_s),
                format_seconds(p.time_s),
                f"{p.algbw / 1e9:.2f}",
                f"{p.busbw / 1e9:.2f}",
            )
    con.print(t)
