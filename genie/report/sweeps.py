"""The figure of a sweep's grid: iteration time and exposed communication per configuration."""

from __future__ import annotations

from collections.abc import Sequence

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
