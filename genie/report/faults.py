"""Figure data for a run with link faults: every iteration on the wire against the fault windows.

A run of ``genie bench --faults`` or ``genie emulate --faults`` keeps its faults in
``meta["faults"]`` (``genie.faults.netns``: schedule, each event as applied, restore, the
effect on iteration time) and its iterations as instances in the store. Here both are put on one
time axis: seconds from the run's time origin (the first measured Go; ``origin_ns`` in the
meta, controller clock, as the instances' ``start_ns``). Pure apart from reading the store.
"""

from __future__ import annotations

from typing import Any

from genie.faults.effect import fault_windows
from genie.report.data import group_key, run_label
from genie.store import RunInfo, RunStore
from genie.units import format_bytes, format_seconds

INCLUDED = (
    "The collective curves and tables below count every measured iteration, those that "
    "overlapped a fault included (their p50 resists a few; their p99 and max do not)."
)
NO_NETEM = (
    "Only link rate changes and links down/up are emulated here: loss and delay need netem, "
    "which this kernel lacks, so no fault adds loss or delay."
)
SHIFT_S = 1e-3  # applied this much later than planned (or more): the figure shows both


def has_faults(run: RunInfo) -> bool:
    """Whether the stored run applied (or tried to apply) link faults."""
    f = (run.meta or {}).get("faults")
    return isinstance(f, dict) and isinstance(f.get("applied"), list)


def _origin(f: dict[str, Any], insts: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The time origin (controller clock ns) and a note when it had to be estimated."""
    o = f.get("origin_ns")
    if isinstance(o, int) and not isinstance(o, bool):
        return o, ""
    measured = [x["start_ns"] for x in insts if not x["warmup"] and x.get("start_ns") is not None]
    if not measured:
        return None, "the run recorded no time origin and no measured iteration: nothing to plot"
    return min(measured), (
        "This run did not record its time origin (runs before it was stored): the origin is "
        "taken as the start of its first measured iteration, so the fault windows may sit up "
        "to the time from that Go to that start too early on this axis."
    )


def _bench_series(insts: list[dict[str, Any]], origin: int, placement: list[str]) -> list[dict]:
    """One series per (curve, size), measured and warm-up apart: never two sizes in one."""
    keys: dict[tuple, dict[str, Any]] = {}
    for x in insts:
        if x.get("start_ns") is None:
            continue
        key = (*group_key(x, placement), int(x["size"]), bool(x["warmup"]))
        s = keys.setdefault(key, {"key": key, "x": [], "y": []})
        s["x"].append((x["start_ns"] - origin) / 1e9)
        s["y"].append(float(x["time_s"]))
    curves = {k[:4] for k in keys}
    out = []
    for key, s in sorted(keys.items(), key=lambda kv: (kv[0][:5], kv[0][5])):
        coll, algo, n, span, size, warm = key
        lab = format_bytes(size)
        if len(curves) > 1:
            lab = f"{coll} / {algo}, {n} ranks, {span}: {lab}"
        out.append(
            {
                "label": lab + (" warm-up (not counted)" if warm else ""),
                "role": "warmup" if warm else "measured",
                "curve": f"{coll} {algo} {n} {span} {size}",
                "size": size,
                "x": s["x"],
                "y": s["y"],
            }
        )
    return out


def _emulate_series(insts: list[dict[str, Any]], origin: int) -> list[dict]:
    """One point per run of the trace: its first collective's start, the span to its last end."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for x in insts:
        if x.get("start_ns") is not None and x.get("end_ns") is not None:
            runs.setdefault(int(x["iteration"]), []).append(x)
    out = []
    for warm, label in ((False, "runs of the trace"), (True, "warm-up runs (not counted)")):
        pts = [
            (min(x["start_ns"] for x in xs), max(x["end_ns"] for x in xs))
            for _, xs in sorted(runs.items())
            if any(x["warmup"] for x in xs) == warm
        ]
        if pts:
            out.append(
                {
                    "label": label,
                    "role": "warmup" if warm else "measured",
                    "curve": "runs",
                    "x": [(a - origin) / 1e9 for a, _ in pts],
                    "y": [(b - a) / 1e9 for a, b in pts],
                }
            )
    return out


def _planned(f: dict[str, Any]) -> dict[int, list[float | None]]:
    """Per event: [planned start, planned end (None: to the run's end)] in seconds."""
    out: dict[int, list[float | None]] = {}
    for a in [*f.get("applied", []), *f.get("not_applied", [])]:
        p = out.setdefault(int(a["event"]), [None, None])
        p[1 if a.get("restore") or "restored" in str(a.get("label", "")) else 0] = a["planned_s"]
    return out


def _windows(f: dict[str, Any], end_s: float) -> list[dict[str, Any]]:
    """Each fault's window as applied (or as planned when its application is unconfirmed)."""
    planned = _planned(f)
    out: list[dict[str, Any]] = []
    for event, label, lo, hi in fault_windows(f, end_s):
        p_lo, p_hi = planned.get(event, [lo, hi])
        shifted = p_lo is not None and abs(lo - p_lo) >= SHIFT_S
        shifted = shifted or (p_hi is not None and abs(hi - p_hi) >= SHIFT_S)
        out.append(
            {"event": event, "label": label, "from_s": lo, "to_s": hi, "confirmed": True,
             "planned_from_s": p_lo, "planned_to_s": p_hi if p_hi is not None else end_s,
             "shifted": shifted}
        )  # fmt: skip
    shown = {w["event"] for w in out}
    for a in f.get("applied", []):  # a lab host that could not confirm: the planned window
        if a.get("restore") or a["event"] in shown or a.get("applied_s") is not None:
            continue
        p_lo, p_hi = planned.get(a["event"], [a["planned_s"], None])
        hi = p_hi if p_hi is not None else end_s
        out.append(
            {"event": a["event"], "label": a["label"], "from_s": p_lo, "to_s": hi,
             "confirmed": False, "planned_from_s": p_lo, "planned_to_s": hi, "shifted": False}
        )  # fmt: skip
        shown.add(a["event"])
    for k, w in enumerate(sorted(out, key=lambda w: w["from_s"])):
        w["number"] = k + 1
        w["title"] = f"{w['label']} for {short_seconds(w['to_s'] - w['from_s'])}"
        if not w["confirmed"]:
            w["title"] += f" from {short_seconds(w['from_s'])} (unconfirmed: as planned)"
        elif w["shifted"]:
            w["title"] += (
                f" from {short_seconds(w['from_s'])} (planned {short_seconds(w['planned_from_s'])}"
                f" to {short_seconds(w['planned_to_s'])})"
            )
        else:
            w["title"] += f" from {short_seconds(w['from_s'])}"
    return sorted(out, key=lambda w: w["number"])


def short_seconds(t: float) -> str:
    """A time in three significant digits of one fitting unit: ``300 ms``, ``1.2 s``."""
    from genie.report.plots import time_unit

    scale, unit = time_unit(abs(t))
    return f"{t / scale:.3g} {unit}"


def _applied_rows(f: dict[str, Any], number: dict[int, int]) -> list[list[str]]:
    """The faults as applied: which (its number in the figure), what, planned, applied, result
    (times from the origin)."""
    rows = []
    for a in f.get("applied", []):
        at = a.get("applied_s")
        late = "" if at is None else f" ({(at - a['planned_s']) * 1e3:+.1f} ms)"
        rows.append(
            [
                number.get(a["event"], "-"),
                a["label"],
                format_seconds(a["planned_s"]),
                "unconfirmed" if at is None else format_seconds(at) + late,
                "ok" if a.get("ok") else str(a.get("error") or "failed"),
            ]
        )
    for a in f.get("not_applied", []):
        rows.append(
            [number.get(a["event"], "-"), a["label"], format_seconds(a["planned_s"]), "-",
             "not applied: run ended"]
        )  # fmt: skip
    return rows


def _effect_rows(f: dict[str, Any], number: dict[int, int]) -> tuple[list[str], list[list]]:
    """The effect as the run recorded it: per fault (and any fault) the p50 of the iterations
    that overlapped it beside the p50 of those that overlapped none."""

    def t(v: float | None) -> str:
        return "-" if v is None else format_seconds(v)

    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    per = [(format_bytes(s["size"]), s) for s in f.get("by_size", [])]
    if not per and isinstance(f.get("effect"), dict):
        per = [("", f["effect"])]
    rows = []
    for size, e in per:
        for x in e.get("events", []):
            rows.append(
                [size, f"{number.get(x['event'], '-')}: {x['label']}", x["runs"],
                 t(x["median_s"]), e["clean_runs"], t(e["clean_median_s"]),
                 ratio(x["vs_clean"])]
            )  # fmt: skip
        if sum(1 for x in e.get("events", []) if x["runs"]) > 1:
            rows.append(
                [size, "any fault", e["fault_runs"], t(e["fault_median_s"]), e["clean_runs"],
                 t(e["clean_median_s"]), ratio(e["fault_vs_clean"])]
            )  # fmt: skip
    head = ["size", "fault", "iterations overlapping", "p50", "iterations clean", "p50", "ratio"]
    if per and per[0][0] == "":
        head, rows = head[1:], [r[1:] for r in rows]
    return head, rows


def _missed(windows: list[dict[str, Any]], series: list[dict[str, Any]]) -> list[str]:
    """Why a fault shows no effect: it overlapped no measured iteration (only warm-ups, or
    the gaps between iterations)."""
    out = []
    for w in windows:
        hit: dict[str, list[str]] = {"measured": [], "warmup": []}
        for s in series:
            if any(
                x < w["to_s"] and w["from_s"] < x + y for x, y in zip(s["x"], s["y"], strict=True)
            ):
                hit[s["role"]].append(s["label"].replace(" warm-up (not counted)", ""))
        if hit["measured"]:
            continue
        where = (
            f"it fell on warm-up iterations ({', '.join(hit['warmup'])}), which are not counted"
            if hit["warmup"]
            else "it fell between iterations"
        )
        out.append(f"Fault {w['number']} ({w['label']}) overlapped no measured iteration: {where}.")
    return out


def fault_figure(store: RunStore, run: RunInfo, index: int = 0) -> dict[str, Any] | None:
    """The "wire and faults" figure of a run with faults (None without): every iteration at
    its start against its duration, each fault window shaded, with the tables the HTML shows."""
    if not has_faults(run):
        return None
    from genie.calibration.runs import run_topology

    f = run.meta["faults"]
    insts = store.instances(run.run_id, include_warmup=True)
    origin, note = _origin(f, insts)
    if origin is None:
        return None
    bench = "by_size" in f
    if bench:
        series = _bench_series(insts, origin, run_topology(run)[1])
        first = insts[0] if insts else {}
        what = f"{first.get('collective')} / {first.get('algorithm')} on "
        what += f"{first.get('n_ranks')} ranks, {run_label(run)}"
        y_label = "time of the iteration"
        unit_of = "each iteration of each size"
    else:
        series = _emulate_series(insts, origin)
        what = f"{run.meta.get('workload') or 'workload'} on {run_label(run)}"
        y_label = "run's communication, first start to last end"
        unit_of = "each run of the trace"
    ends = [x + y for s in series for x, y in zip(s["x"], s["y"], strict=True)]
    end_s = float(f.get("run_end_s") or 0.0) or max(ends, default=0.0)
    restored = f.get("restored") or {}
    windows = _windows(f, max(end_s, *ends) if ends else end_s)
    number = {w["event"]: w["number"] for w in windows}
    origin_text = f.get("time_origin") or "the first measured run's Go (after the warm-ups)"
    return {
        "id": f"faults{index}",
        "kind": "fault_timeline",
        "title": f"{what}: {unit_of} on the wire, with the link faults",
        "run_id": run.run_id,
        "x": {"label": "time from the first measured Go", "unit": "s", "scale": "linear"},
        "y": {"label": y_label, "unit": "s", "scale": "log"},
        "series": series,
        "name": run_label(run),
        "windows": windows,
        "origin": origin_text,
        "origin_note": note,
        "applied": _applied_rows(f, number),
        "effect": _effect_rows(f, number),
        "restored": bool(restored.get("ok")),
        "restore_errors": list(restored.get("errors") or []),
        "notes": [*_missed(windows, series), INCLUDED if bench else "", NO_NETEM],
    }
