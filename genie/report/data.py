"""Figure data for reports: plain dicts of numbers, built from the run store or simulate JSON.

Pure apart from reading the store: nothing here draws. Every figure is a dict
``{"id", "kind", "title", "x": {"label", "unit", "scale"}, "y": {...}, "series": [...]}``
(``series``: ``{"label", "run_id", "role", "x", "y", ...}``), so ``--json`` and the PNGs show
the same numbers. Units: sizes in bytes, times in seconds, bandwidths in bytes/s
(the plots print GB/s = 10^9 bytes/s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from genie.calibration.runs import program_hosts, run_calibration, run_topology, stored_program
from genie.errors import GenieError, UsageError
from genie.report import labels
from genie.store import RunInfo, RunStore

MODEL_POINTS_PER_OCTAVE = 2  # analytical curve: sizes between the measured ones, per doubling


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _group_key(inst: dict[str, Any], placement: Sequence[str] = ()) -> tuple[str, str, int, str]:
    """(collective, algorithm, ranks, intra-host or inter-host): points of one curve."""
    return (inst["collective"], inst["algorithm"], int(inst["n_ranks"]), _span(inst, placement))


def _span(inst: dict[str, Any], placement: Sequence[str]) -> str:
    """``intra-host`` when every rank of the instance sat on one host, else ``inter-host``:
    the two are different links, so they are never one curve."""
    spec = inst.get("program") or {}
    ranks = spec.get("ranks") or list(range(int(inst["n_ranks"])))
    try:
        hosts = {placement[int(r)] for r in ranks}
    except (IndexError, ValueError, TypeError):
        return "inter-host"
    return "intra-host" if len(hosts) == 1 and len(ranks) > 1 else "inter-host"


def model_time(spec: dict[str, Any], size: int, topology, placement: Sequence[str]) -> float | None:
    """Cost-model time (s) of the stored program ``spec`` at buffer ``size`` (None if unpriced)."""
    from genie.collectives.cost import estimate

    if topology is None:
        return None
    prog = stored_program(spec, size)
    hosts = program_hosts(prog, placement) if prog is not None else None
    if hosts is None:
        return None
    try:
        return float(estimate(prog, topology, hosts).time_s)
    except GenieError:
        return None


def _model_sizes(sizes: Sequence[int]) -> list[int]:
    """Measured sizes plus log-spaced sizes between them (a smooth analytical curve)."""
    lo, hi = min(sizes), max(sizes)
    out = set(int(s) for s in sizes)
    if hi > lo:
        n = math.ceil(math.log2(hi / lo) * MODEL_POINTS_PER_OCTAVE)
        for v in np.geomspace(lo, hi, n + 1):
            out.add(round(float(v)))
    return sorted(out)


def bench_groups(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Per (collective, algorithm, ranks) of a run: measured statistics and the model per size.

    A dilated run's times are the wire's divided by its dilation K and its model the lab's / K
    (``genie.calibration.dilation.reported_s``), as ``genie bench``/``emulate`` printed them.
    """
    from genie.calibration.accuracy import error_pct
    from genie.calibration.dilation import reported_s, run_dilation
    from genie.calibration.model import calibrate_topology
    from genie.vocabulary import bus_factor

    run = store.run(run_id)
    insts = store.instances(run.run_id)
    topo, placement = run_topology(run)
    k = run_dilation(run.meta)

    def model(spec: dict[str, Any], size: int, topology) -> float | None:
        t = model_time(spec, size, topology, placement)
        return None if t is None else reported_s(t, k)

    cal = run_calibration(store, run)
    cal_topo = calibrate_topology(topo, cal) if cal and topo is not None else None
    groups: dict[tuple[str, str, int, str], dict[int, list[dict]]] = {}
    for x in insts:
        groups.setdefault(_group_key(x, placement), {}).setdefault(int(x["size"]), []).append(x)
    out = []
    for (coll, algo, n, span), by_size in sorted(groups.items()):
        sizes = sorted(by_size)
        rows = []
        for s in sizes:
            times = [reported_s(float(x["time_s"]), k) for x in by_size[s]]
            p50 = _pct(times, 50)
            alg = s / p50 if p50 > 0 else 0.0
            spec = by_size[s][0]["program"]
            modeled = model(spec, s, topo)
            calibrated = model(spec, s, cal_topo)
            rows.append(
                {
                    "size": s,
                    "iterations": len(times),
                    "time_p50_s": p50,
                    "time_p99_s": _pct(times, 99),
                    "time_min_s": min(times),
                    "time_max_s": max(times),
                    "times_s": times,
                    "algbw_Bps": alg,
                    "busbw_Bps": alg * bus_factor(coll, n),
                    "modeled_s": modeled,
                    "calibrated_s": calibrated,
                    "nominal_error_pct": error_pct(modeled, p50),
                    "calibrated_error_pct": error_pct(calibrated, p50),
                }
            )
        spec = by_size[sizes[0]][0]["program"]
        curve = []
        for s in _model_sizes(sizes):
            t = model(spec, s, topo)
            if t is not None and t > 0:
                curve.append({"size": s, "time_s": t, "busbw_Bps": s / t * bus_factor(coll, n)})
        out.append(
            {
                "run_id": run.run_id,
                "run_label": run_label(run),
                "collective": coll,
                "algorithm": algo,
                "n_ranks": n,
                "span": span,
                "rows": rows,
                "model": curve,
                "calibration": cal.label if cal else None,
                "calibration_params": cal.describe() if cal else None,
                "dilation": k,
            }
        )
    return out


def run_facts(run: RunInfo) -> dict[str, Any]:
    """What the HTML says about a run: its row, testbed text, host facts and clock offsets."""
    return {
        "run_id": run.run_id,
        "status": run.status,
        "command": run.command,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "genie_version": run.genie_version,
        "testbed_name": run.testbed_name,
        "testbed": run.testbed,
        "host_facts": run.host_facts,
        "clock_offsets": run.clock_offsets,
        "meta": run.meta,
        "error": run.error,
        "instances": run.instances,
    }


_LABEL_META = ("transport", "dilation", "mode", "calibration", "streams", "iterations")


def run_label(run: RunInfo) -> str:
    """The run named by what it ran on: testbed, transport, dilation (not its id)."""
    meta = run.meta or {}
    parts = [run.testbed_name or "testbed"]
    for k in _LABEL_META[:2]:
        v = meta.get(k)
        if v not in (None, "", 1, 1.0, "tcp"):
            parts.append(f"{k} {v}")
    return ", ".join(parts)


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
            on = _testbeds(gs) + _dilated(gs)
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


def _testbeds(gs: Sequence[dict[str, Any]]) -> str:
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
                    "title": f"{coll} on {_testbeds(gs)}: model error vs message size, "
                    "(model - measured) / measured",
                    "x": {"label": "message size (whole buffer)", "unit": "bytes", "scale": "log2"},
                    "y": {"label": "model error", "unit": "%", "scale": "linear"},
                    "series": series,
                }
            )
    return figs


# ---- simulated / emulated runs ----------------------------------------------------------------
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


MAX_LANES = 16  # timeline lanes drawn; more ranks (or groups) are aggregated
DRILL_RANKS = 64  # ranks in the per-rank drill-down figure of an aggregated timeline


def _union(spans: list[list[float]]) -> list[list[float]]:
    """[start, duration] intervals merged where they overlap or touch."""
    out: list[list[float]] = []
    for a, d in sorted(spans):
        if out and a <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], a + d - out[-1][0])
        else:
            out.append([a, d])
    return out


def aggregate_ranks(series: list[dict[str, Any]], lanes: int = MAX_LANES) -> list[dict[str, Any]]:
    """Per-rank timeline lanes as at most ``lanes`` lanes of consecutive ranks: each shows when
    any rank of its block was computing, communicating or waiting."""
    k = -(-len(series) // lanes)
    out = []
    for b in range(0, len(series), k):
        block = series[b : b + k]
        roles: dict[str, list[list[float]]] = {}
        for s in block:
            for role, spans in s["spans"].items():
                roles.setdefault(role, []).extend(spans)
        lo, hi = block[0].get("rank", b), block[-1].get("rank", b + len(block) - 1)
        out.append(
            {
                "label": f"ranks {lo}-{hi}" if hi != lo else f"rank {lo}",
                "ranks": [s.get("rank") for s in block],
                "spans": {role: _union(v) for role, v in roles.items()},
            }
        )
    return out


def _with_drilldown(fig: dict[str, Any], what: str) -> dict[str, Any]:
    """An aggregated timeline (``aggregate_ranks``) with the per-rank one as its drill-down."""
    if len(fig["series"]) <= MAX_LANES:
        return fig
    per_rank = fig["series"]
    drill = {
        **fig,
        "id": f"{fig['id']}_ranks",
        "title": fig["title"] + f" (per rank, first {min(len(per_rank), DRILL_RANKS)})",
        "series": per_rank[:DRILL_RANKS],
    }
    return {
        **fig,
        "title": fig["title"] + f"; {len(per_rank)} {what}, "
        f"{-(-len(per_rank) // MAX_LANES)} to a lane",
        "series": aggregate_ranks(per_rank),
        "drilldown": drill,
    }


def _group_kind(name: str) -> str:
    """A group's name with its indices as '#': the lanes of one kind of group share it."""
    import re

    return re.sub(r"(?<![A-Za-z])\d+|\d+(?![A-Za-z])", "#", name)  # p2p stays p2p


def _readable(group: str) -> str:
    """A group's readable name: ``dp_p0_t1`` of ``3 (dp_p0_t1)`` (ASTRA-sim's integer process
    groups keep their names in parentheses), else the name itself."""
    import re

    m = re.fullmatch(r"\d+ \((.+)\)", group)
    return m.group(1) if m else group


def _family(kind: str) -> str:
    """What a kind of group is, in a word: ``dp`` of ``dp_p#_t#``, ``p2p`` of ``p2p #->#``."""
    import re

    m = re.match(r"[A-Za-z][A-Za-z0-9]*", kind)
    return m.group(0) if m else "groups"


def _natural(name: str) -> list[Any]:
    """Sort key: numbers inside a name by value (``tp 2`` before ``tp 10``)."""
    import re

    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def emulated_timeline(
    doc: dict[str, Any], workload: str, source: str, tag: str
) -> dict[str, Any] | None:
    """Per-rank timeline of one iteration measured by ``genie emulate`` (its median run).

    Each member of an instance waits from its own start until the last member arrived, then
    communicates until its own end; seconds from the start of that run.
    """
    insts = [x for x in doc.get("instances") or [] if x.get("rank_intervals_s")]
    if not insts:
        return None
    n_runs = min(len(x["rank_intervals_s"]) for x in insts)
    if n_runs == 0:
        return None
    spans_of_run = [[x["intervals_s"][k] for x in insts] for k in range(n_runs)]
    makespans = [max(iv[2] for iv in ivs) for ivs in spans_of_run]
    k = sorted(range(n_runs), key=lambda i: makespans[i])[(n_runs - 1) // 2]  # the median run
    per: dict[int, dict[str, list[list[float]]]] = {}
    for x in insts:
        arrival = x["intervals_s"][k][1]
        for rank, start, end in x["rank_intervals_s"][k]:
            lanes = per.setdefault(int(rank), {"comm": [], "wait": []})
            begin = max(start, arrival)
            if begin > start:
                lanes["wait"].append([start, begin - start])
            lanes["comm"].append([begin, max(0.0, end - begin)])
    fig = {
        "id": f"{tag}_measured_timeline",
        "kind": "rank_timeline",
        "title": f"{workload}: one iteration's communication measured on the testbed "
        f"(run {k + 1} of {n_runs}, the median)",
        "source": source,
        "x": {"label": "time from the start of the iteration", "unit": "s", "scale": "linear"},
        "y": {"label": "rank", "unit": "", "scale": "category"},
        "iteration_s": makespans[k],
        "measured_run": k,
        "series": [{"label": f"rank {r}", "rank": r, "spans": per[r]} for r in sorted(per)],
    }
    return _with_drilldown(fig, "ranks")


def collective_timeline(
    report: dict[str, Any], workload: str, source: str, tag: str, backend: str | None = None
) -> dict[str, Any]:
    """Timeline of one iteration from the report's collective rows: one lane per group."""
    lanes: dict[str, list[list[float]]] = {}
    waits: dict[str, list[list[float]]] = {}
    names: dict[str, list[str]] = {}
    for c in report.get("collectives") or []:
        g = str(c["group"])
        lanes.setdefault(g, []).append([c["start"], c["end"] - c["start"]])
        names.setdefault(g, []).append(c["collective"])
        if c["start"] > c["first_arrival"]:
            waits.setdefault(g, []).append([c["first_arrival"], c["start"] - c["first_arrival"]])
    per_group = {g: (list(lanes[g]), list(waits.get(g, [])), list(names[g])) for g in lanes}
    if len(lanes) > MAX_LANES:  # many groups: one lane per kind of group (indices as '#')
        kinds: dict[str, str] = {g: _group_kind(_readable(g)) for g in lanes}
        merged: dict[str, list[list[float]]] = {}
        mwaits: dict[str, list[list[float]]] = {}
        mnames: dict[str, list[str]] = {}
        for g, k in kinds.items():
            merged.setdefault(k, []).extend(lanes[g])
            mwaits.setdefault(k, []).extend(waits.get(g, []))
            mnames.setdefault(k, []).extend(names[g])
        count = {k: list(kinds.values()).count(k) for k in merged}
        families = [_family(k) for k in merged]

        def lab(k: str) -> str:
            if count[k] == 1:  # one group of its kind: its own name
                return next(_readable(g) for g, kk in kinds.items() if kk == k)
            name = _family(k) if families.count(_family(k)) == 1 else k
            return f"{name} ({count[k]} groups)"

        lanes = {lab(k): _union(v) for k, v in merged.items()}
        waits = {lab(k): _union(v) for k, v in mwaits.items()}
        names = {lab(k): v for k, v in mnames.items()}
    series = [
        {"label": g, "role": "comm", "spans": lanes[g], "names": names[g]}
        | {"waits": waits.get(g, [])}
        for g in sorted(lanes, key=_natural)
    ]
    fig = {
        "id": f"{tag}_timeline",
        "kind": "timeline",
        "title": f"{workload} ({backend or report['backend']}): collectives in one iteration",
        "source": source,
        "x": {"label": "time in the iteration", "unit": "s", "scale": "linear"},
        "y": {"label": "communicator group", "unit": "", "scale": "category"},
        "iteration_s": report["iteration_s"],
        "series": series,
    }
    if len(per_group) > len(series):  # aggregated: every group in the HTML's drill-down
        fig["drilldown"] = {
            **fig,
            "id": f"{tag}_timeline_groups",
            "title": fig["title"] + f" (per group, first {min(len(per_group), DRILL_RANKS)})",
            "series": [
                {"label": g, "role": "comm", "spans": sp, "names": nm, "waits": wt}
                for g, (sp, wt, nm) in sorted(
                    per_group.items(), key=lambda kv: _natural(_readable(kv[0]))
                )[:DRILL_RANKS]
            ],
        }
        fig["title"] += f"; {len(per_group)} groups as {len(series)} kinds"
    return fig


TRACK_ROLE = {"compute": "compute", "comm": "comm", "wait": "wait", "memory/other": "other"}


def trace_timeline(doc: Any, source: str, index: int = 0, max_ranks: int = 4096) -> dict[str, Any]:
    """Timeline of one iteration per rank from a Chrome trace of ``genie simulate --trace``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"{source}: not a Chrome-trace JSON (no 'traceEvents')")
    tracks: dict[tuple[int, int], str] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
    spans: dict[int, dict[str, list[list[float]]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("pid", 0) >= max_ranks:
            continue
        role = TRACK_ROLE.get(tracks.get((e["pid"], e.get("tid", 0)), ""), "other")
        per = spans.setdefault(int(e["pid"]), {})
        per.setdefault(role, []).append([e["ts"] * 1e-6, e.get("dur", 0) * 1e-6])
    other = doc.get("otherData") or {}
    end = max((s + d for r in spans.values() for v in r.values() for s, d in v), default=0.0)
    left = max(0, int(other.get("ranks_shown", len(spans))) - len(spans))
    left += int(other.get("ranks_left_out", 0))
    title = f"one iteration per rank ({other.get('backend', 'trace')} model)"
    if left:
        title += f"; first {len(spans)} ranks, {left} left out"
    fig = {
        "id": f"trace{index}_timeline",
        "kind": "rank_timeline",
        "title": title,
        "source": source,
        "x": {"label": "time in the iteration", "unit": "s", "scale": "linear"},
        "y": {"label": "rank", "unit": "", "scale": "category"},
        "iteration_s": end,
        "ranks_left_out": left,
        "series": [{"label": f"rank {r}", "rank": r, "spans": spans[r]} for r in sorted(spans)],
    }
    return _with_drilldown(fig, "ranks")


# ---- sweeps -------------------------------------------------------------------------------------
SWEEP_METRICS = (("iteration_s", "iteration time", None), ("exposed_comm_s", "exposed comm", "//"))


def sweep_figure(rows: Sequence[dict], keys: Sequence[str], title: str, model: str) -> dict:
    """Iteration time and exposed communication across a sweep's grid (seconds).

    Two or three points: grouped bars side by side, one bar per configuration. More: small
    multiples, one panel per combination of the leading keys, the last key along x.
    """
    y = {"label": "time per iteration", "unit": "s", "scale": "linear"}
    base = {"id": "sweep", "title": f"{title} ({model})", "y": y}
    if len(rows) <= 3:
        return {
            **base,
            "kind": "grouped_bars",
            "groups": [name for _, name, _ in SWEEP_METRICS],
            "x": {"label": "", "unit": "", "scale": "category"},
            "series": [
                {"label": r["label"], "y": [r.get(m) for m, _, _ in SWEEP_METRICS]} for r in rows
            ],
        }
    last = keys[-1]
    lead = list(keys[:-1])
    xs: list[str] = []
    for r in rows:
        if r["point"][last] not in xs:
            xs.append(r["point"][last])
    panels: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(r["point"][k] for k in lead)
        p = panels.setdefault(
            key,
            {
                "title": ", ".join(f"{k} {v}" for k, v in zip(lead, key, strict=True)),
                "x": xs,
                "series": [
                    {"label": name, "y": [None] * len(xs), "color": f"C{i}", "hatch": hatch}
                    for i, (_, name, hatch) in enumerate(SWEEP_METRICS)
                ],
            },
        )
        j = xs.index(r["point"][last])
        for s, (m, _, _) in zip(p["series"], SWEEP_METRICS, strict=True):
            s["y"][j] = r.get(m)
    return {
        **base,
        "kind": "small_multiples",
        "x": {"label": last, "unit": "", "scale": "category"},
        "panels": list(panels.values()),
    }
