"""Figures of simulate/emulate documents (``genie simulate --json``, ``genie emulate --json``).

One document: its iteration time per backend, each backend's per-rank breakdown, the exposed
communication by parallelism dimension and its timelines (``genie.report.timelines``). Several:
side-by-side bars, each configuration labelled by what differs between them
(``genie.report.labels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from genie.errors import UsageError
from genie.report import labels
from genie.report.timelines import collective_timeline, emulated_timeline


def _check_sim_doc(doc: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("reports"), list) or not doc["reports"]:
        raise UsageError(
            f"{source}: not the JSON of `genie simulate --json` or `genie emulate --json` "
            "(no 'reports')"
        )
    for r in doc["reports"]:
        if not isinstance(r, dict) or not {"backend", "iteration_s", "ranks"} <= r.keys():
            raise UsageError(f"{source}: a report lacks backend/iteration_s/ranks")
    return doc["reports"]


def config_label(doc: dict[str, Any]) -> str:
    """What a simulate/emulate document ran: the workload on the testbed or the fabric, with the
    facts that set it (``genie.report.labels``)."""
    return labels.config_phrase(labels.doc_facts(doc))


def run_kind(docs: Sequence[dict[str, Any]]) -> str:
    """``simulated``, ``emulated`` or ``simulated and emulated``: what some documents ran."""
    emulated = {bool(d.get("run_id") and d.get("testbed") and d.get("runs") is not None)
                for d in docs}  # fmt: skip
    return {frozenset([True]): "emulated", frozenset([False]): "simulated"}.get(
        frozenset(emulated), "simulated and emulated"
    )


def network_label(text: str) -> str:
    """A pricer's long description made short: ``leaf_spine, 16 hosts, 12.5 GB/s links``."""
    import re

    head = text.split(";")[0].strip()
    kind = re.match(r"(\w+) topology: (\d+) hosts", head)
    rate = re.search(r"([\d.]+) GB/s(?: per link)?", text)
    out = f"{kind.group(1)}, {kind.group(2)} hosts" if kind else head.split(",")[0] or "network"
    if rate:
        out += f", {float(rate.group(1)):g} GB/s links"
    return out


def backend_label(doc: dict[str, Any], backend: str) -> str:
    """A backend named by what it is: ``measured on TESTBED`` rather than ``testbed:RUN_ID``."""
    if backend.startswith("testbed:"):
        return f"measured on {doc.get('testbed') or 'the testbed'}"
    return backend


def _where_figure(reports: list, workload: str, source: str, tag: str) -> dict | None:
    """Exposed communication per backend, stacked by parallelism dimension (TP/PP/DP/EP)."""
    dims: list[str] = []
    for r in reports:
        for d in r.get("exposed_by_dimension") or {}:
            if d not in dims:
                dims.append(d)
    if not dims:
        return None
    backends = [r["backend"] for r in reports]
    return {
        "id": f"{tag}_where",
        "kind": "stacked_ranks",
        "title": f"{workload}: exposed communication by parallelism dimension",
        "source": source,
        "x": {"label": "network backend", "unit": "", "scale": "category"},
        "y": {"label": "exposed communication per rank", "unit": "s", "scale": "linear"},
        "iteration_s": None,
        "series": [
            {
                "label": d,
                "role": d,
                "x": backends,
                "y": [float((r.get("exposed_by_dimension") or {}).get(d, 0.0)) for r in reports],
            }
            for d in dims
        ],
    }


# "blocked", as the CLI's tables say: a collective ready but not started (peers late, or queued
# behind its stream) while nothing else ran; "waiting for peers" is the measured timeline's
PART_NAMES = {"exposed_comm": "exposed comm", "wait": "blocked"}


def sim_figures(
    doc: dict[str, Any], source: str, index: int = 0, bars: bool = True, label: str | None = None
) -> list[dict[str, Any]]:
    """Iteration time per backend (``bars``), the per-rank breakdown per backend, a timeline;
    ``label`` names the configuration (default: ``config_label``)."""
    reports = _check_sim_doc(doc, source)
    config = label or config_label(doc)
    tag = f"sim{index}"
    names = [backend_label(doc, r["backend"]) for r in reports]
    what = "measured and modelled" if run_kind([doc]) == "emulated" else "simulated"
    figs: list[dict[str, Any]] = [
        {
            "id": f"{tag}_iteration",
            "kind": "backend_bars",
            "title": f"{config}: {what} iteration time per network model",
            "source": source,
            "x": {"label": "network backend", "unit": "", "scale": "category"},
            "y": {"label": "iteration time", "unit": "s", "scale": "linear"},
            "series": [
                {
                    "label": "iteration time",
                    "role": "simulated",
                    "x": names,
                    "y": [r["iteration_s"] for r in reports],
                }
            ],
        }
    ]
    measured = [
        float(x["makespan_s"])
        for x in doc.get("runs") or []
        if isinstance(x, dict) and x.get("makespan_s") is not None and not x.get("warmup")
    ]
    if measured:  # `genie emulate`: the whole iteration's communication timed on the agents
        on = next((n for n, r in zip(names, reports, strict=True)
                   if r["backend"].startswith("testbed")), names[0])  # fmt: skip
        figs[0]["series"].append(
            {
                "label": "communication makespan measured on the testbed, each iteration",
                "role": "measured_iterations",
                "x": [on] * len(measured),
                "y": measured,
            }
        )
    if not bars:
        figs = []
    for b, r in enumerate(reports):
        ranks = r["ranks"]
        figs.append(
            {
                "id": f"{tag}_breakdown{b}",
                "kind": "stacked_ranks",
                "title": f"{config} ({names[b]}): where each rank's iteration went",
                "config": config,
                "backend": names[b],
                "source": source,
                "x": {"label": "rank", "unit": "", "scale": "category"},
                "y": {"label": "time in the iteration", "unit": "s", "scale": "linear"},
                "iteration_s": r["iteration_s"],
                "series": [
                    {
                        "label": PART_NAMES.get(part, part),
                        "role": part,
                        "x": [k["rank"] for k in ranks],
                        "y": [float(k.get(part) or 0.0) for k in ranks],
                    }
                    for part in ("compute", "exposed_comm", "wait", "idle")
                ],
            }
        )
    where = _where_figure(reports, config, source, tag) if bars else None
    if where:
        where["series"] = [{**x, "x": names} for x in where["series"]]
        figs.append(where)
    figs.append(collective_timeline(reports[0], config, source, tag, names[0]))
    measured_tl = emulated_timeline(doc, config, source, tag)
    if measured_tl:
        figs.append(measured_tl)
    return figs


def _configurations(
    docs: Sequence[tuple[str, dict[str, Any]]], first_only: bool = False
) -> tuple[list[tuple[str, dict[str, Any], dict[str, Any]]], list[str], str]:
    """One entry per (document, backend) (its first backend only with ``first_only``), a label
    for each naming what differs between them, and what they all share."""
    entries = []
    facts = []
    for source, doc in docs:
        reports = _check_sim_doc(doc, source)
        for r in reports[:1] if first_only else reports:
            entries.append((source, doc, r))
            f = labels.doc_facts(doc)
            if len(reports) > 1 or r["backend"] != "analytical":  # the model named already
                f["backend"] = backend_label(doc, r["backend"])
            facts.append(f)
    names, shared = labels.distinct_labels(facts, [s for s, _, _ in entries])
    return entries, names, shared


def compare_where(docs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """Exposed communication by parallelism dimension, one stacked bar per configuration (its
    first backend), side by side."""
    entries, names, shared = _configurations(docs, first_only=True)
    fig = _where_figure([r for _, _, r in entries], "", "", "compare")
    if fig is None:
        return None
    what = run_kind([d for _, d in docs])
    fig["title"] = f"{what}: exposed communication per rank by parallelism dimension ({shared})"
    fig["x"] = {"label": "configuration", "unit": "", "scale": "category"}
    fig["series"] = [{**x, "x": names} for x in fig["series"]]
    return fig


PARTS = (
    ("iteration_s", "iteration"),
    ("compute", "compute"),
    ("exposed_comm", "exposed comm"),
    ("wait", "blocked"),
)


def compare_sims(docs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Several simulate/emulate documents side by side: grouped bars of the iteration and its
    per-rank mean breakdown, one bar per (configuration, backend), each labelled by what differs
    between them (what they share goes to the title)."""
    entries, names, shared = _configurations(docs)
    series: list[dict[str, Any]] = []
    for i, ((source, _doc, r), lab) in enumerate(zip(entries, names, strict=True)):
        ranks = r["ranks"] or [{}]
        ys = [float(r["iteration_s"])]
        for key, _ in PARTS[1:]:
            ys.append(float(np.mean([float(k.get(key) or 0.0) for k in ranks])))
        series.append({"label": lab, "y": ys, "source": source, "color": f"C{i % 10}"})
    what = run_kind([d for _, d in docs])
    return {
        "id": "compare_iterations",
        "labels": names,
        "kind": "grouped_bars",
        "title": f"{what}: iteration time and where it went, per-rank means ({shared})",
        "shared": shared,
        "groups": [name for _, name in PARTS],
        "x": {"label": "", "unit": "", "scale": "category"},
        "y": {"label": "time per iteration", "unit": "s", "scale": "linear"},
        "series": series,
    }
