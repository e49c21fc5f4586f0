"""What every report figure must hold, checked on its data (``figures.json``), not by eye.

``genie.report.plots.draw`` records each axis it drew into the figure dict (``axes``: limits
in the figure's data units, labels, scales, the unit of its ticks); ``figure_problems`` reads
that record beside the plotted numbers and says, one line each:

- a bar, point, band or span outside its axis (clipped);
- two series, bars or categories of one figure with the same label (drawn over each other);
- an axis label whose unit is not the unit of its ticks;
- a figure with no title or no record of its axes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

REL = 1e-9  # rounding slack, relative to the axis span


def _outside(values: Iterable[float | None], lim: Sequence[float], what: str) -> list[str]:
    lo, hi = sorted(lim)
    slack = (hi - lo) * REL
    bad = [v for v in values if v is not None and v == v and not lo - slack <= v <= hi + slack]
    if not bad:
        return []
    return [f"{what}: {len(bad)} value(s) outside the axis [{lo:.6g}, {hi:.6g}], e.g. {bad[0]:.6g}"]


def _duplicates(names: Sequence[Any], what: str) -> list[str]:
    seen: set[str] = set()
    dup = []
    for n in names:
        key = str(n)
        if key in seen and key not in dup:
            dup.append(key)
        seen.add(key)
    return [f"{what}: the same label twice: {d!r}" for d in dup]


def _units(ax: dict[str, Any], where: str) -> list[str]:
    out = []
    for axis in ("x", "y"):
        unit, label = ax.get(f"{axis}_unit"), ax.get(f"{axis}label") or ""
        if unit and f"({unit}" not in label:
            out.append(f"{where}: the {axis} ticks are in {unit} but its label says {label!r}")
    return out


def _stack_tops(series: Sequence[dict[str, Any]]) -> list[float]:
    n = max((len(s["y"]) for s in series), default=0)
    return [sum(float(s["y"][i] or 0.0) for s in series if i < len(s["y"])) for i in range(n)]


def _spans_end(series: Sequence[dict[str, Any]]) -> list[float]:
    ends: list[float] = []
    for s in series:
        spans = s.get("spans")
        groups = spans.values() if isinstance(spans, dict) else [spans or [], s.get("waits") or []]
        ends.extend(a + d for g in groups for a, d in g)
    return ends


def figure_problems(fig: dict[str, Any]) -> list[str]:
    """What is wrong with one drawn figure (an empty list: nothing)."""
    fid, kind = fig.get("id", "?"), fig.get("kind")
    axes = fig.get("axes") or []
    out: list[str] = [] if fig.get("title") else [f"{fid}: no title"]
    if not axes:
        return [*out, f"{fid}: no record of its axes (drawn by genie.report.plots.draw?)"]
    for ax in axes:
        out += _units(ax, f"{fid}" + (f" panel {ax['panel']}" if "panel" in ax else ""))
    ax = axes[0]
    series = fig.get("series") or []
    if kind == "small_multiples":
        for k, p in enumerate(fig["panels"]):
            rec = next((a for a in axes if a.get("panel") == k), None)
            if rec is None:
                out.append(f"{fid}: panel {k} was not drawn")
                continue
            vals = [v for s in p["series"] for v in s["y"]]
            out += _outside(vals, rec["ylim"], f"{fid} panel {k} ({p.get('title', '')})")
            out += _duplicates([s["label"] for s in p["series"]], f"{fid} panel {k}")
            out += _duplicates(p["x"], f"{fid} panel {k} categories")
        titles = [p.get("title", "") for p in fig["panels"]]
        out += _duplicates(titles, f"{fid} panels") if len(titles) > 1 else []
    elif kind == "grouped_bars":
        out += _outside([v for s in series for v in s["y"]], ax["ylim"], fid)
        out += _duplicates([s["label"] for s in series], fid)
    elif kind == "stacked_ranks":
        out += _outside(_stack_tops(series), ax["ylim"], fid)
        if series and series[0]["x"] and isinstance(series[0]["x"][0], str):
            out += _duplicates(series[0]["x"], f"{fid} categories")
    elif kind == "backend_bars":
        out += _outside([v for s in series for v in s["y"]], ax["xlim"], fid)
        out += _duplicates(series[0]["x"] if series else [], f"{fid} categories")
    elif kind in ("size_sweep", "model_error"):
        keys = ("y", "y_min", "y_max")
        out += _outside([v for s in series for k in keys for v in s.get(k, [])], ax["ylim"], fid)
        out += _outside([v for s in series for v in s["x"]], ax["xlim"], f"{fid} sizes")
        out += _duplicates([s["label"] for s in series], fid)
    elif kind in ("timeline", "rank_timeline"):
        out += _outside(_spans_end(series), ax["xlim"], fid)
        out += _duplicates([s["label"] for s in series], f"{fid} lanes")
    elif kind == "fault_timeline":
        ends = [x + y for s in series for x, y in zip(s["x"], s["y"], strict=True)]
        out += _outside([*ends, *(x for s in series for x in s["x"])], ax["xlim"], fid)
        out += _outside([v for s in series for v in s["y"]], ax["ylim"], fid)
    return out


def report_problems(doc: dict[str, Any]) -> list[str]:
    """Every figure's problems in a ``figures.json`` document (drill-downs included), and
    figure titles given twice."""
    figs = list(doc.get("figures") or [])
    figs += [f["drilldown"] for f in figs if f.get("drilldown")]
    out = [p for f in figs for p in figure_problems(f)]
    return out + _duplicates([f.get("title") for f in figs], "figure titles")
