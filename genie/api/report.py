"""``write_report``: PNG plots, a self-contained report.html and figures.json (``genie report``).

In: stored runs (bench or emulate runs of the run store: busbw and time per size, measured
beside genie's cost model on the run's own testbed, the model's error, faults), simulation
documents (``Simulation.to_dict()`` or an emulation's ``doc()`` written as JSON files: iteration
time per backend, per-rank breakdown, timelines) and Chrome traces (``Simulation.write_trace``).
Out: the files in ``out``; the result (``genie.report.Report``) lists them, and its
``to_dict()`` is what ``genie report --json`` prints (and figures.json holds). Needs matplotlib.
"""

from __future__ import annotations

from genie import progress
from genie.api.specs import Spec
from genie.report import Report, build_report
from genie.store import DEFAULT_STORE


class ReportSpec(Spec, frozen=True, kw_only=True):
    """A report of ``runs`` (ids or unique prefixes; the first is the main one, the others
    overlaid) of ``store``, and of the simulation documents ``sims`` and Chrome traces
    ``traces`` (JSON files), written into the directory ``out``."""

    out: str
    runs: tuple[str, ...] = ()
    sims: tuple[str, ...] = ()
    traces: tuple[str, ...] = ()
    store: str = DEFAULT_STORE


def write_report(spec: ReportSpec) -> Report:
    """Draw the report ``spec`` describes into ``spec.out`` (see the module docstring)."""
    with progress.stage(f"drawing the report into {spec.out}"):
        return build_report(spec.store, spec.runs, spec.out, sims=spec.sims, traces=spec.traces)
