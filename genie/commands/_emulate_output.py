"""What ``genie emulate`` prints: per collective or instance measured beside the model, how the
wire ran the job, the replays, the model errors, link faults, and several jobs side by side."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from genie.calibration.accuracy import summary, weighted_error
from genie.commands._faults import print_applied
from genie.commands._jobs import job_cells, print_contended, seconds_pair, slowdown_cells
from genie.commands._model_error import print_error_table
from genie.commands._sim_output import print_reports, print_summary
from genie.commands._steady import unsteady
from genie.live.isolated import Isolated
from genie.live.overlapped import Overlapped
from genie.units import format_bytes, format_seconds

ROWS = 8  # instance rows of the short default; --detail: up to DETAIL_ROWS
DETAIL_ROWS = 40
MORE = (
    "more: --detail (how the wire ran it, per rank, where the time goes, the busiest links, "
    "every instance replayed, the model error per collective), --json, genie report {run} --out "
    "DIR"
)


def print_isolated(con: Console, i: Isolated, detail: bool = False) -> None:
    """The per-collective table, then (``detail``) how the wire ran it, the replays and the model
    errors per collective, else the iteration's summary and the model error in a few lines."""
    dil = f", dilated x{i.models.k:g} (times / {i.models.k:g})" if i.models.k != 1 else ""
    t = Table(
        title=f"collectives measured on {i.testbed} (run {i.run_id}){dil}", title_justify="left"
    )
    for c in ("collective", "algorithm", "ranks", "size", "count", "measured p50", "model"):
        t.add_column(c, justify="left" if c in ("collective", "algorithm") else "right")
    t.add_column("meas/model", justify="right")
    for row in i.rows:
        model = row["modeled_s"]
        t.add_row(
            row["collective"],
            row["algorithm"],
            str(len(row["ranks"])),
            format_bytes(row["size"]),
            str(row["count"]),
            format_seconds(row["measured_p50_s"]),
            format_seconds(model) if model else "-",
            f"{row['measured_p50_s'] / model:.2f}" if model else "-",
        )
    con.print(t)
    assert i.compiled is not None
    if not detail:
        print_summary(con, i.compiled, i.network, i.reports)
        print_error_summary(con, i.errors(), i.iteration(), i.models, i.notes)
        con.print(MORE.format(run=i.run_id), markup=False, highlight=False)
        return
    for note in i.wire:
        con.print(f"on the wire: {note}")
    print_reports(con, i.compiled, i.network, i.reports, None, 20)
    print_errors(con, i.errors(), i.iteration(), i.models, i.notes)


def print_errors(con: Console, errors, iteration, models, notes, limit: int = 40) -> None:
    """The model-error tables (collectives, then the iteration) and the run's notes."""
    hint = models.missing
    print_error_table(
        con,
        "model error per collective",
        errors[:limit],
        models.nominal_label,
        models.calibration,
        hint,
    )
    if len(errors) > limit:
        con.print(f"({len(errors) - limit} more rows; --json lists all)")
    print_error_table(
        con,
        "model error of the iteration: measured times replayed vs the models replayed",
        [iteration],
        models.nominal_label,
        models.calibration,
        hint,
    )
    for note in notes:
        con.print(note, markup=False, highlight=False)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


def _mape(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} %"


def print_error_summary(con: Console, errors, iteration, models, notes) -> None:
    """The model error in a few lines: the iteration replayed, the MAPE and time-weighted error
    over the collectives, what each model is; then the run's notes."""
    cal = models.calibration is not None
    model = "-" if iteration.nominal_s is None else format_seconds(iteration.nominal_s)
    line = (
        f"model error, (model - measured) / measured: the iteration replayed "
        f"{_pct(iteration.nominal_err)} nominal ({model} vs {format_seconds(iteration.measured_s)}"
        " measured)"
    )
    con.print(
        line + (f", {_pct(iteration.calibrated_err)} calibrated" if cal else ""), markup=False
    )
    if errors:
        s = summary(errors)
        line = f"  the {len(errors)} collectives: MAPE nominal {_mape(s['nominal_mape_pct'])}"
        line += (
            f", time-weighted {_mape(weighted_error((r.nominal_s, r.measured_s) for r in errors))}"
        )
        if cal:
            line += (
                f"; calibrated {_mape(s['calibrated_mape_pct'])}, time-weighted "
                f"{_mape(weighted_error((r.calibrated_s, r.measured_s) for r in errors))}"
            )
        con.print(line, markup=False, highlight=False)
    con.print("  nominal = genie's cost model of the network above", markup=False)
    if cal:
        con.print(f"  calibrated = the same model with {models.calibration.label}", markup=False)
    elif models.missing:
        con.print(f"  calibrated: {models.missing}", markup=False, highlight=False)
    for note in notes:
        con.print(note, markup=False, highlight=False)


def print_overlapped(con: Console, o: Overlapped, detail: bool = False) -> None:
    """The per-instance table, the trace's time on the wire, the link faults, the iteration and
    the model error; ``detail`` adds how the wire ran it, the replay reports and the model error
    per instance (the short default: the first ``ROWS`` instances)."""
    cw = o.compiled
    assert cw is not None
    limit = DETAIL_ROWS if detail else ROWS
    k = o.models.k if o.models else 1.0
    t = Table(
        title=f"communication of {cw.name} run on {o.testbed}, overlapped (run {o.run_id})"
        + (f", dilated x{k:g} (times / {k:g})" if k != 1 else ""),
        title_justify="left",
    )
    for c in ("instance", "collective", "ranks", "size", "measured p50", "model alone"):
        t.add_column(c, justify="left" if c == "collective" else "right")
    t.add_column("meas/model", justify="right")
    for row in o.rows[:limit]:
        model = row["modeled_s"]
        t.add_row(
            str(row["iid"]),
            f"{row['collective']} {row['algorithm']}",
            str(len(row["ranks"])),
            format_bytes(row["size"]),
            format_seconds(row["measured_p50_s"]),
            format_seconds(model) if model else "-",
            f"{row['measured_p50_s'] / model:.2f}" if model else "-",
        )
    con.print(t)
    if len(o.rows) > limit:
        more = "--json lists all" if detail else "--detail shows 40, --json all"
        con.print(f"({len(o.rows) - limit} more instances; {more})")
    if detail:
        for note in o.wire:
            con.print(f"on the wire: {note}")
    spans = o.spans()
    dil = f" (divided by the dilation {k:g})" if k != 1 else ""
    apart = o.spread()
    con.print(
        f"trace on the wire: median {format_seconds(float(np.median(spans)))} from the common "
        f"start to the last op's end, over {len(spans)} runs{dil}"
        + (
            ""
            if apart is None
            else f"; the runs lie {apart:.1%} apart (max / min - 1){unsteady(apart)}"
        ),
        markup=False,
    )
    if o.replay_comm_end_s is not None and o.reports:  # short: the wire-vs-replay key
        con.print(
            f"replay: last communication ends at "
            f"{format_seconds(o.replay_comm_end_s)}, the iteration at "
            f"{format_seconds(o.reports[0].iteration_s)} (compute after it: replayed only)"
        )
    if o.faults is not None:
        print_faults(con, o.faults)
    if not detail:
        print_summary(con, cw, o.network, o.reports)
        print_error_summary(con, o.errors(), o.iteration(), o.models, o.notes)
        con.print(MORE.format(run=o.run_id), markup=False, highlight=False)
        return
    print_reports(con, cw, o.network, o.reports, None, 20)
    print_errors(con, o.errors(), o.iteration(), o.models, o.notes, limit)


def print_faults(con: Console, f: dict) -> None:
    """The link faults as applied (from the first measured run's Go) and their effect."""
    print_applied(con, f, "the first measured run's Go")
    e = f["effect"]
    base = e["clean_median_s"]
    con.print(
        f"runs overlapping no fault: {e['clean_runs']}, median "
        f"{format_seconds(base) if base is not None else '-'} (measured on the wire)"
    )
    for x in e["events"]:
        med, ratio = x["median_s"], x["vs_clean"]
        con.print(
            f"runs overlapping '{x['label']}' ({format_seconds(x['from_s'])} to "
            f"{format_seconds(x['to_s'])}): {x['runs']}, median "
            f"{format_seconds(med) if med is not None else '-'}"
            + (f", {ratio:.2f}x the runs without faults" if ratio is not None else "")
        )


def print_wire_jobs(con: Console, doc: dict) -> None:
    """Per job: measured alone / together / slowdown beside the model's; contended links."""
    t = Table(
        title=f"jobs on {doc['testbed']}: measured on the wire (runs: together "
        f"{doc['run_together']}, alone {', '.join(str(j['run_alone']) for j in doc['jobs'])}) "
        "beside the analytical model",
        title_justify="left",
    )
    cols = ["job", "ranks", "hosts", "start", "measured alone", "measured together", "slowdown"]
    cols += ["wire span alone / together", "model alone", "model together", "model slowdown"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("job", "hosts") else "right")
    for j in doc["jobs"]:
        t.add_row(
            *job_cells(j),
            *slowdown_cells(j, "measured_"),
            seconds_pair(j["wire_span_alone_s"], j["wire_span_together_s"]),
            *slowdown_cells(j, "model_"),
        )
    con.print(t)
    con.print(
        f"measured: {doc['measured']}; wire span: from the job's start to its last collective's "
        "end on the wire (median over the runs); model: " + doc["model"]
    )
    for note in doc["wire"]:
        con.print(f"on the wire: {note}")
    con.print(f"contended links below are the model's ({doc['network']})")
    print_contended(con, doc)
