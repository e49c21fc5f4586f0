"""Build a report: read runs and simulate JSON, make figure data, draw PNGs, write the HTML."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genie import progress
from genie.errors import UsageError
from genie.report import data, labels, size_figures, timelines
from genie.report import simulation_figures as simfigs
from genie.report.checks import report_problems
from genie.report.counters import group_counters, group_lines, sources_line, table_rows
from genie.report.faults import fault_figure
from genie.report.html import render_html
from genie.store import RunStore

log = logging.getLogger(__name__)

HTML_NAME = "report.html"
JSON_NAME = "figures.json"


@dataclass
class Report:
    """What ``build_report`` wrote and the figure data behind it."""

    out: Path
    html: Path
    json_path: Path
    runs: list[str]
    figures: list[dict[str, Any]]
    files: dict[str, Path] = field(default_factory=dict)
    tables: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready data (units: bytes, seconds, bytes/s)."""
        return {
            "runs": self.runs,
            "html": str(self.html),
            "units": {"size": "bytes", "time": "s", "bandwidth": "bytes/s (GB/s = 1e9 B/s)"},
            "figures": [{**f, "file": str(self.files[f["id"]])} for f in self.figures],
            "tables": self.tables,
        }


def _read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"file not found: {p}")
    try:
        return json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: not JSON ({exc})") from None


def _subject(groups: list[dict[str, Any]], docs: list[tuple[str, Any]]) -> str:
    """What the report is about, by name: testbeds and workloads, not run ids."""
    names: list[str] = []
    for g in groups:
        t = size_figures.testbeds_label([g])
        if t not in names:
            names.append(t)
    for _, doc in docs:
        if isinstance(doc, dict) and doc.get("reports"):
            lab = simfigs.config_label(doc)
            if lab not in names:
                names.append(lab)
    return "; ".join(names) or "traces"


def build_report(
    store_path: str | Path | None,
    run_ids: Sequence[str],
    out: str | Path,
    *,
    sims: Sequence[str | Path] = (),
    traces: Sequence[str | Path] = (),
) -> Report:
    """Write PNGs, ``report.html`` and ``figures.json`` for runs (first = main) into ``out``."""
    from genie.report.plots import draw, require_matplotlib

    require_matplotlib()
    if not run_ids and not sims and not traces:
        raise UsageError("nothing to report: give a RUN_ID or --sim/--trace files")
    groups: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    resolved: list[str] = []
    fault_figs: list[dict[str, Any]] = []
    if run_ids:
        if store_path is None or not Path(store_path).is_file():
            raise UsageError(f"run store not found: {store_path}")
        with RunStore(store_path) as store:
            for rid in run_ids:
                run = store.run(rid)
                if run.run_id in resolved:
                    continue
                resolved.append(run.run_id)
                facts.append(data.run_facts(run))
                counted = group_counters(store.counters(run.run_id))
                if counted:  # the NIC and stack counters per size or iteration: a small table
                    head, rows = table_rows(counted)
                    facts[-1]["counters"] = {
                        "sources": sources_line(counted),
                        "head": head,
                        "rows": rows,
                        "lines": group_lines(counted),
                    }
                groups.extend(data.bench_groups(store, run.run_id))
                fig = fault_figure(store, run, len(fault_figs))
                if fig is not None:
                    fault_figs.append(fig)
    size_figures.distinct_run_labels(groups)
    figures = size_figures.bench_figures(groups) + fault_figs + size_figures.error_figures(groups)
    sim_errors = []
    docs = [(str(s), _read_json(s)) for s in sims]
    if len(docs) > 1:  # several configurations: one figure side by side, not one per file
        figures.append(simfigs.compare_sims(docs))
        where = simfigs.compare_where(docs)
        if where:
            figures.append(where)
    names = _doc_labels(docs)
    said: dict[str, list[str]] = {}  # note -> the files (backends) that said it, in order
    for i, (s, doc) in enumerate(docs):
        figures.extend(simfigs.sim_figures(doc, str(s), i, bars=len(docs) == 1, label=names[i]))
        if isinstance(doc.get("model_error"), list) and doc["model_error"]:
            sim_errors.append((str(s), doc["model_error"]))
        if doc.get("network"):
            said.setdefault(f"network {doc['network']}", []).append(str(s))
        for r in doc.get("reports", []):
            for n in r.get("notes") or []:
                said.setdefault(n, []).append(f"{s} ({r['backend']})")
    notes = [_said_by(n, who, len(docs)) for n, who in said.items()]
    for i, t in enumerate(traces):
        figures.append(timelines.trace_timeline(_read_json(t), str(t), i))
    if not figures:
        raise UsageError(f"run {resolved[0]} has no measured instances to plot")
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    files = {}
    todo = figures + [f["drilldown"] for f in figures if f.get("drilldown")]
    with progress.bar("drawing", len(todo), "plots") as bar:
        for f in todo:  # each as PNG (inlined in the HTML), SVG and PDF (for papers)
            files[f["id"]] = draw(f, outdir / f"{f['id']}.png", all_formats=True)[0]
            bar.advance()
            bar.describe(f"drew {f['id']}")
    title = "genie report: " + _subject(groups, docs)
    html = outdir / HTML_NAME
    what = simfigs.run_kind([d for _, d in docs]) if docs else "simulated"  # traces: simulate's
    page = render_html(title, facts, groups, figures, files, notes, sim_errors, what)
    html.write_text(page)
    rep = Report(outdir, html, outdir / JSON_NAME, resolved, figures, files, groups)
    doc = rep.to_dict()
    rep.json_path.write_text(json.dumps(doc, indent=1))
    for problem in report_problems(doc):
        log.warning("figure check: %s", problem)
    return rep


def _doc_labels(docs: Sequence[tuple[str, Any]]) -> list[str]:
    """Each document's configuration in full, told apart by file where two are the same."""
    full = [simfigs.config_label(d) for _, d in docs]
    if len(set(full)) == len(full):
        return full
    facts = [labels.doc_facts(d) for _, d in docs]
    names, _shared = labels.distinct_labels(facts, [s for s, _ in docs])
    return [f"{f} ({n})" for f, n in zip(full, names, strict=True)]


def _said_by(note: str, who: list[str], n_docs: int) -> str:
    """A note once, with who said it: every file, or the ones that did."""
    files = {w.split(" (")[0] for w in who}
    if n_docs > 1 and len(files) == n_docs and len(who) > 1:
        return f"every file: {note}"
    if len(who) == 1:
        return f"{who[0]}: {note}"
    return f"{', '.join(who)}: {note}"
