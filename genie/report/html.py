"""One self-contained ``report.html``: figures as base64 data URIs, tables, run and host facts."""

from __future__ import annotations

import base64
import datetime as _dt
import json
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from genie.units import format_bytes, format_seconds
from genie.wire.conditions import conditions_of, flatten

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555}
img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.8em;max-height:28em}
.note{color:#555;font-size:.9em}
"""


def _when(t: float | None) -> str:
    if not t:
        return "-"
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(head: list[str], rows: list[list[Any]], left: int = 1) -> str:
    def cell(tag: str, i: int, v: Any) -> str:
        cls = ' class="l"' if i < left else ""
        return f"<{tag}{cls}>{escape(str(v))}</{tag}>"

    h = "".join(cell("th", i, v) for i, v in enumerate(head))
    b = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{b}</table>"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}" '
        f'data-file="{escape(path.name)}">'
    )


def _formats(png: Path) -> str:
    """The figure's files: PNG, SVG and PDF beside each other."""
    return ", ".join(png.with_suffix(x).name for x in (".png", ".svg", ".pdf"))


def _run_section(facts: dict[str, Any]) -> str:
    rows = [
        ["run", facts["run_id"]],
        ["status", facts["status"] + (f" ({facts['error']})" if facts["error"] else "")],
        ["command", facts["command"]],
        ["started", _when(facts["created_at"])],
        ["finished", _when(facts["finished_at"])],
        ["genie version", facts["genie_version"]],
        ["testbed", facts["testbed_name"]],
        ["measured instances", facts["instances"]],
    ]
    head = f"Run on {facts['testbed_name']}" if facts.get("testbed_name") else "Run"
    out = [f"<h2>{escape(head)} ({escape(facts['run_id'])})</h2>", _table(["", ""], rows, left=2)]
    hosts = []
    for agent, f in sorted(facts["host_facts"].items()):
        nics = ", ".join(
            f"{n.get('name')} mtu {n.get('mtu')}"
            + (f" {n['speed_mbit']} Mbit/s" if n.get("speed_mbit") else "")
            for n in f.get("nics", [])
            if n.get("up")
        )
        hosts.append(
            [
                agent,
                f.get("hostname", ""),
                f"{f.get('cpus_logical', '?')} / {f.get('cpus_physical', '?')}",
                format_bytes(f["memory_bytes"]) if f.get("memory_bytes") else "-",
                nics,
                f.get("python", ""),
                f.get("platform", ""),
            ]
        )
    if hosts:
        out.append("<h3>Hosts (facts each agent reported at its hello)</h3>")
        cols = ["agent", "hostname", "CPUs logical/physical", "memory", "NICs up", "python"]
        out.append(_table([*cols, "platform"], hosts, left=2))
    cond = flatten(conditions_of(facts["meta"] or {}))
    if cond:
        out.append("<h3>Conditions (read back from the agents' data connections)</h3>")
        out.append(_table(["condition", "value"], [[k, v] for k, v in cond.items()], left=2))
    counted = facts.get("counters")
    if counted:
        out.append("<h3>NIC and stack counters (deltas per size or iteration, per agent)</h3>")
        out.append(f'<p class="note">read: {escape(counted["sources"])}</p>')
        out.extend(f'<p class="note">{escape(line)}</p>' for line in counted["lines"])
        out.append(_table(counted["head"], counted["rows"], left=2))
    offs = [
        [
            a,
            format_seconds(o.get("offset_ns", 0) * 1e-9),
            format_seconds(o.get("uncertainty_ns", 0) * 1e-9),
            format_seconds(o.get("rtt_min_ns", 0) * 1e-9),
        ]
        for a, o in sorted(facts["clock_offsets"].items())
    ]
    if offs:
        out.append("<h3>Clock offsets to the controller</h3>")
        out.append(_table(["agent", "offset", "uncertainty", "min RTT"], offs))
    if facts["testbed"]:
        out.append("<h3>Testbed file of the run</h3>")
        out.append(f"<pre>{escape(facts['testbed'])}</pre>")
    if facts["meta"]:
        meta = json.dumps(facts["meta"], indent=1, sort_keys=True)
        out.append(f"<details><summary>run options</summary><pre>{escape(meta)}</pre></details>")
    return "\n".join(out)


def _group_table(g: dict[str, Any]) -> str:
    rows = []
    for r in g["rows"]:
        m = r["modeled_s"]
        rows.append(
            [
                format_bytes(r["size"]),
                r["iterations"],
                format_seconds(r["time_p50_s"]),
                format_seconds(r["time_p99_s"]),
                f"{r['algbw_Bps'] / 1e9:.3f}",
                f"{r['busbw_Bps'] / 1e9:.3f}",
                format_seconds(m) if m else "-",
                f"{r['time_p50_s'] / m:.2f}" if m else "-",
            ]
        )
    head = ["size", "iters", "time p50", "p99", "algbw GB/s", "busbw GB/s", "model", "meas/model"]
    title = (
        f"{g['collective']} / {g['algorithm']} on {g['n_ranks']} ranks, {g.get('span', '')} "
        f"on {g.get('run_label') or g['run_id']} (run {g['run_id']})"
    )
    return f"<h3>{escape(title)}</h3>" + _table(head, rows)


def _error_table(g: dict[str, Any]) -> str:
    """Measured vs nominal vs calibrated per size of one group, with the MAPE of each."""
    from genie.calibration.accuracy import mape

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:+.1f} %"

    rows = [
        [
            format_bytes(r["size"]),
            format_seconds(r["time_p50_s"]),
            format_seconds(r["modeled_s"]) if r["modeled_s"] else "-",
            pct(r.get("nominal_error_pct")),
            format_seconds(r["calibrated_s"]) if r.get("calibrated_s") else "-",
            pct(r.get("calibrated_error_pct")),
        ]
        for r in g["rows"]
    ]
    nom = mape(r.get("nominal_error_pct") for r in g["rows"])
    cal = mape(r.get("calibrated_error_pct") for r in g["rows"])
    head = ["size", "measured p50", "nominal", "error", "calibrated", "error"]
    title = (
        f"model error: {g['collective']} / {g['algorithm']} on {g['n_ranks']} ranks, "
        f"{g.get('span', '')} on {g.get('run_label') or g['run_id']}"
    )
    said = (
        f"calibrated = {g['calibration']} ({g['calibration_params']})"
        if g.get("calibration")
        else "no calibration of this testbed in the store (genie calibrate RUN)"
    )
    summary = f"MAPE: nominal {'-' if nom is None else f'{nom:.1f} %'}"
    if cal is not None:
        summary += f", calibrated {cal:.1f} %"
    return (
        f"<h3>{escape(title)}</h3>"
        + _table(head, rows)
        + f'<p class="note">{escape(summary)}; nominal = the cost model of the run\'s testbed as '
        f"declared; {escape(said)}.</p>"
    )


def _sim_error_table(source: str, rows: list[dict[str, Any]]) -> str:
    """An emulate run's model error rows (``genie emulate --json``'s ``model_error``)."""

    def t(v: float | None) -> str:
        return "-" if v is None else format_seconds(v)

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:+.1f} %"

    body = [
        [
            r["label"],
            "-" if r.get("size") is None else format_bytes(r["size"]),
            t(r["measured_s"]),
            t(r.get("nominal_s")),
            pct(r.get("nominal_error_pct")),
            t(r.get("calibrated_s")),
            pct(r.get("calibrated_error_pct")),
        ]
        for r in rows
    ]
    head = ["what", "size", "measured", "nominal", "error", "calibrated", "error"]
    return f"<h3>model error of {escape(source)}</h3>" + _table(head, body)


def _fault_section(f: dict[str, Any], png: Path) -> str:
    """A run's iterations on the wire with its link faults: the figure, the faults as applied,
    their effect on the iteration time, and what is not emulated."""
    head, effect = f["effect"]
    restored = (
        "Every touched link was restored to the testbed file's state after the run."
        if f["restored"]
        else "Restoring the links FAILED: " + "; ".join(f["restore_errors"])
    )
    out = [
        f"<h2>Wire and faults: {escape(f['name'])}</h2>",
        f"<figure>{_img(png, f['title'])}<figcaption>{escape(f['title'])} ({_formats(png)}). "
        "Each dot is where an iteration (a run of the trace) started, its line runs to where "
        "it ended, at the height of its duration; hollow = warm-up, not counted. Shaded: each "
        "fault's window as applied (dashed: as planned, where that differs by 1 ms or more); "
        f"times from {escape(f['origin'])}.</figcaption></figure>",
        "<h3>Faults as applied</h3>",
        _table(["", "fault", "planned", "applied (late by)", "result"], f["applied"], left=2),
        f'<p class="note">{escape(restored)}</p>',
        "<h3>Effect on the iteration time (measured on the wire, as the run recorded it)</h3>",
        _table(head, effect, left=2 if head[0] == "size" else 1),
        '<p class="note">overlapping: the measured iterations whose span overlapped the '
        "fault's window; clean: those that overlapped no fault; p50 of each; ratio = p50 "
        "overlapping / p50 clean.</p>",
    ]
    out.extend(f'<p class="note">{escape(n)}</p>' for n in [f["origin_note"], *f["notes"]] if n)
    return "\n".join(out)


_PARTS = ("compute", "exposed_comm", "wait", "idle")


def _breakdown_table(figs: list[dict[str, Any]]) -> str:
    """Iteration time and the mean breakdown over ranks, one row per simulated backend."""
    rows = []
    for f in figs:
        means = {s["role"]: sum(s["y"]) / len(s["y"]) if s["y"] else 0.0 for s in f["series"]}
        name = f"{f['config']} ({f['backend']})" if "config" in f else f["title"].split(": ")[0]
        rows.append(
            [name, format_seconds(f["iteration_s"])]
            + [format_seconds(means.get(k, 0.0)) for k in _PARTS]
        )
    head = ["workload over backend", "iteration", "compute", "exposed comm", "blocked"]
    head.append("idle")
    return _table(head, rows) + (
        '<p class="note">compute, exposed comm, blocked and idle: means over ranks; on every '
        "rank they add up to the iteration time. blocked: a collective ready but not started "
        "(its peers late, or queued behind its stream) while nothing else ran.</p>"
    )


def render_html(
    title: str,
    facts: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    figures: list[dict[str, Any]],
    files: dict[str, Path],
    sim_notes: list[str],
    sim_errors: Sequence[tuple[str, list[dict[str, Any]]]] = (),
    what: str = "",
) -> str:
    """The whole page as a string (images inlined from ``files``: figure id -> PNG path);
    ``what``: simulated, emulated or both, for the iterations' heading."""
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        '<p class="note">Units: sizes in bytes (KiB = 2^10 B, MiB = 2^20 B); every time carries '
        "its unit (ns, us, ms, s; figure axes say theirs, figures.json is in seconds); "
        "bandwidths in GB/s = 10^9 bytes/s (nccl-tests: algbw = S/t, busbw = algbw x factor). "
        "The analytical curves are genie's cost model priced on the run's own testbed.</p>",
    ]
    for f in figures:  # first: the faults are what such a run was about
        if f["kind"] == "fault_timeline":
            parts.append(_fault_section(f, files[f["id"]]))
    for kind, heading, table in (
        ("size_sweep", "Collectives: measured beside the analytical model", _group_table),
        ("model_error", "How far the model is from the wire", _error_table),
    ):
        figs = [f for f in figures if f["kind"] == kind]
        if figs:
            parts.append(f"<h2>{heading}</h2>")
            for f in figs:
                parts.append(f"<figure>{_img(files[f['id']], f['title'])}")
                parts.append(f"<figcaption>{escape(f['title'])} ({_formats(files[f['id']])})")
                parts.append("</figcaption></figure>")
            parts.extend(table(g) for g in groups)
    other = [f for f in figures if f["kind"] not in ("size_sweep", "model_error", "fault_timeline")]
    if other:
        heading = f"{what or 'simulated and emulated'} iterations"
        parts.append(f"<h2>{escape(heading[0].upper() + heading[1:])}</h2>")
        stacks = [
            f for f in other if f["kind"] == "stacked_ranks" and f.get("iteration_s") is not None
        ]
        if stacks:
            parts.append(_breakdown_table(stacks))
        for source, rows in sim_errors:
            parts.append(_sim_error_table(source, rows))
        for n in sim_notes:
            parts.append(f'<p class="note">{escape(n)}</p>')
        for f in other:
            src = f" from {f['source']}" if f.get("source") else ""
            parts.append(f"<figure>{_img(files[f['id']], f['title'])}")
            parts.append(f"<figcaption>{escape(f['title'] + src)} ({_formats(files[f['id']])})")
            parts.append("</figcaption></figure>")
            drill = f.get("drilldown")
            if drill and drill["id"] in files:
                parts.append(
                    f"<details><summary>drill down: {escape(drill['title'])}</summary>"
                    f"<figure>{_img(files[drill['id']], drill['title'])}</figure></details>"
                )
    for fa in facts:
        parts.append(_run_section(fa))
    parts.append("</body></html>\n")
    return "\n".join(parts)
