"""Figures of measured bench runs over message size: bus bandwidth, time and the model's error.

Each takes the groups of ``genie.report.data.bench_groups`` (one per collective, algorithm,
ranks and span of a run) and overlays every run's groups, one figure per collective; runs that
share a label are told apart first (``distinct_run_labels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any


def _label(g: dict[str, Any], many_runs: bool, spans: AbstractSet[str | None] | None = None) -> str:
    base = f"{g['algorithm']}, {g['n_ranks']} ranks"
    if spans and len(spans) > 1:
        base += f", {g['span']}"
    return f"{g.get('run_label') or g['run_id']}: {base}" if many_runs else base


def distinct_run_labels(groups: Sequence[dict[str, Any]]) -> None:
    """Make runs with the same label tell apart (testbed, then the run's start order)."""
    seen: dict[str, list[str]] = {}
    for g in groups:
        ids = seen.setdefault(g.get("run_label") or g["run_id"], [])
        if g["run_id"] not in ids:
            ids.append(g["run_id"])
    for g in groups:
        lab = g.get("run_label") or g["run_id"]
        ids = seen[lab]
        if len(ids) > 1:
            g["run_label"] = f"{lab} (run {ids.index(g['run_id']) + 1} of {len(ids)})"


def _by_collective(
    groups: Sequence[dict[str, Any]],
) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """The groups by collective (in first-seen order), and whether they come from several runs."""
    by_coll: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        by_coll.setdefault(g["collective"], []).append(g)
    return by_coll, len({g["run_id"] for g in groups}) > 1


def bench_figures(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two figures per collective (busbw and time vs size), every run's groups overlaid."""
    by_coll, many = _by_collective(groups)
    figs = []
    size_axis = {"label": "message size (whole buffer)", "unit": "bytes", "scale": "log2"}
    for coll, gs in by_coll.items():
        for metric in ("busbw", "time"):
            series = []
            spans = {g.get("span") for g in gs}
            for g in gs:
                rows = g["rows"]
                lab = _label(g, many, spans)
                meas = {
                    "label": f"{lab}: measured p50",
                    "run_id": g["run_id"],
                    "role": "measured",
                    "x": [r["size"] for r in rows],
                }
                if metric == "busbw":
                    meas["y"] = [r["busbw_Bps"] for r in rows]
                else:
                    meas["y"] = [r["time_p50_s"] for r in rows]
                    meas["y_min"] = [r["time_min_s"] for r in rows]
                    meas["y_max"] = [r["time_max_s"] for r in rows]
                series.append(meas)
                if g["model"]:
                    key = "busbw_Bps" if metric == "busbw" else "time_s"
                    series.append(
                        {
                            "label": f"{lab}: analytical model",
                            "run_id": g["run_id"],
                            "role": "model",
                            "x": [m["size"] for m in g["model"]],
                            "y": [m[key] for m in g["model"]],
                        }
                    )
            on = testbeds_label(gs) + _dilated(gs)
            if metric == "busbw":
                y = {"label": "bus bandwidth", "unit": "bytes/s", "scale": "linear"}
                title = f"{coll} on {on}: bus bandwidth vs message size"
            else:
                y = {"label": "time per collective", "unit": "s", "scale": "log"}
                title = f"{coll} on {on}: completion time vs message size"
            figs.append(
                {
                    "id": f"{metric}_{coll}",
                    "kind": "size_sweep",
                    "title": title,
                    "x": size_axis,
                    "y": y,
                    "series": series,
                }
            )
    return figs


def _dilated(gs: Sequence[dict[str, Any]]) -> str:
    """What a figure of dilated runs says after the testbed (their labels say it when mixed)."""
    ks = {float(g.get("dilation") or 1.0) for g in gs}
    k = ks.pop() if len(ks) == 1 else 1.0
    return f", dilated x{k:g} (times / {k:g})" if k != 1 else ""


def testbeds_label(gs: Sequence[dict[str, Any]]) -> str:
    """The testbeds of some groups, by name."""
    names: list[str] = []
    for g in gs:
        t = (g.get("run_label") or g["run_id"]).split(",")[0].split(" (run ")[0]
        if t not in names:
            names.append(t)
    return " and ".join(names)


def error_figures(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per collective: the model's error vs size, nominal and calibrated (percent)."""
    by_coll, many = _by_collective(groups)
    figs = []
    for coll, gs in by_coll.items():
        series = []
        spans = {g.get("span") for g in gs}
        for g in gs:
            lab = _label(g, many, spans)
            for role, key, name in (
                ("nominal", "nominal_error_pct", "nominal model"),
                ("calibrated", "calibrated_error_pct", g.get("calibration") or "calibrated"),
            ):
                pts = [(r["size"], r[key]) for r in g["rows"] if r.get(key) is not None]
                if pts:
                    series.append(
                        {
                            "label": f"{lab}: {name}",
                            "run_id": g["run_id"],
                            "role": role,
                            "x": [x for x, _ in pts],
                            "y": [y for _, y in pts],
                        }
                    )
        if series:
            figs.append(
                {
                    "id": f"error_{coll}",
                    "kind": "model_error",
                    "title": f"{coll} on {testbeds_label(gs)}: model error vs message size, "
                    "(model - measured) / measured",
                    "x": {"label": "message size (whole buffer)", "unit": "bytes", "scale": "log2"},
                    "y": {"label": "model error", "unit": "%", "scale": "linear"},
                    "series": series,
                }
            )
    return figs
