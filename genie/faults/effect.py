"""What link faults did to a run: each fault's window on the run's timeline, the runs it
overlapped against those it did not, and the Chrome-trace events that draw both."""

from __future__ import annotations


def fault_windows(records: dict, end_s: float) -> list[tuple[int, str, float, float]]:
    """Per applied event (event, label, from, to) in seconds from the start: from when it was
    applied to when its ``for`` ended, else to the end of the run (``end_s``)."""
    applied = [a for a in records.get("applied", []) if a["ok"]]
    out = []
    for a in applied:
        if a["restore"]:
            continue
        until = next(
            (b["applied_s"] for b in applied if b["restore"] and b["event"] == a["event"]),
            end_s,
        )
        out.append((a["event"], a["label"], a["applied_s"], until))
    return out


def fault_effect(runs: list[dict], windows: list[tuple[int, str, float, float]]) -> dict:
    """Median iteration of the runs that overlapped each fault window (and any of them) vs
    those that overlapped none (``runs``: non-warm-up, each with ``start_s``, ``makespan_s``;
    seconds)."""
    import numpy as np

    def overlaps(r: dict, w: tuple) -> bool:
        return r["start_s"] < w[3] and w[2] < r["start_s"] + r["makespan_s"]

    clean = [r["makespan_s"] for r in runs if not any(overlaps(r, w) for w in windows)]
    base = float(np.median(clean)) if clean else None
    hit_any = [r["makespan_s"] for r in runs if any(overlaps(r, w) for w in windows)]
    any_med = float(np.median(hit_any)) if hit_any else None
    per = []
    for w in windows:
        hit = [r["makespan_s"] for r in runs if overlaps(r, w)]
        med = float(np.median(hit)) if hit else None
        per.append(
            {
                "event": w[0],
                "label": w[1],
                "from_s": w[2],
                "to_s": w[3],
                "runs": len(hit),
                "median_s": med,
                "vs_clean": med / base if med is not None and base else None,
            }
        )
    return {
        "clean_runs": len(clean),
        "clean_median_s": base,
        "fault_runs": len(hit_any),  # overlapping any fault window
        "fault_median_s": any_med,
        "fault_vs_clean": any_med / base if any_med is not None and base else None,
        "events": per,
    }


def trace_events(records: dict, runs: list[dict], pid: int) -> list[dict]:
    """Chrome-trace events of the wire's timeline: every run, each fault window and instant."""
    ev: list[dict] = [
        {"ph": "M", "pid": pid, "name": "process_name",
         "args": {"name": "wire: runs and link faults (from the first measured Go)"}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "thread_name", "args": {"name": "runs"}},
        {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "faults"}},
    ]  # fmt: skip
    for k, r in enumerate(runs):
        name = f"run {k + 1}" + (" (warm-up)" if r.get("warmup") else "")
        ev.append(
            {"ph": "X", "pid": pid, "tid": 0, "name": name, "ts": r["start_s"] * 1e6,
             "dur": r["makespan_s"] * 1e6, "args": {"makespan_s": r["makespan_s"]}}
        )  # fmt: skip
    end = max((r["start_s"] + r["makespan_s"] for r in runs), default=0.0)
    for event, label, lo, hi in fault_windows(records, end):
        ev.append(
            {"ph": "X", "pid": pid, "tid": 1, "name": label, "ts": lo * 1e6,
             "dur": max(0.0, hi - lo) * 1e6, "args": {"event": event}}
        )  # fmt: skip
    for a in records.get("applied", []):
        if a["applied_s"] is None:  # a lab host's fault not confirmed
            continue
        ev.append(
            {"ph": "i", "s": "g", "pid": pid, "tid": 1, "name": a["label"],
             "ts": a["applied_s"] * 1e6, "args": {"planned_s": a["planned_s"], "ok": a["ok"]}}
        )  # fmt: skip
    return ev
