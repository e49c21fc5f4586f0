"""Timeline figures of one iteration: per rank, per communicator group, or from a Chrome trace.

Lanes hold ``[start, duration]`` spans (seconds) by role (compute, comm, wait, ...). More than
``MAX_LANES`` ranks or groups are aggregated into blocks or kinds, with the first
``DRILL_RANKS`` lanes kept as the HTML's drill-down figure.
"""

from __future__ import annotations

from typing import Any

from genie.errors import UsageError

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
