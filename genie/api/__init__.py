"""genie's Python API: the library the ``genie`` command line is one client of.

Describe what to run with frozen, typed specs, call one function, read a typed result::

    import genie
    spec = genie.SimulateSpec(workload="/tmp/dp", fabric=genie.Fabric(bandwidth="100gbit"))
    sim = genie.simulate(spec)
    sim.iteration_s, sim.reports[0].collectives[0], sim.to_dict()

Specs (``genie.api.specs``, ``genie.api.workload``, ``genie.api.benchmark``): ``Fabric``,
``Model``, ``Compute``, ``Perturb``, ``Job``, ``SimulateSpec``, ``EmulateSpec``, ``BenchSpec``,
the generators ``Microbench``, ``DataParallel``, ``Transformer``, ``MixtureOfExperts``, and
``CalibrateSpec``, ``CalibrateComputeSpec``, ``ReportSpec``, ``SweepSpec`` (with ``Axis``); each
converts to and from plain data (``to_dict``, ``from_dict``).

Calls:

* ``simulate(SimulateSpec) -> Simulation``: replay over the analytical model, measured times or
  ASTRA-sim's models; one ``SimReport`` per backend (iteration time, per-rank breakdown,
  per-collective rows, busiest links, and the backend that priced each number);
* ``emulate(EmulateSpec) -> Overlapped | Isolated | JobsOnWire``: the workload's communication
  on a testbed's agents, replayed with the measured times beside the models;
* ``bench(BenchSpec) -> BenchResult``: one collective over sizes on the agents, nccl-tests style;
* ``generate(Microbench | DataParallel | Transformer | MixtureOfExperts) -> Generated``;
* ``place(n_ranks, mode, ...) -> Placement``: the one rule that puts ranks on hosts;
* ``calibrate(CalibrateSpec) -> Calibration``: the cost model fitted to bench runs, its error
  on held-back sizes (nominal and calibrated), stored for later pricing;
* ``calibrate_compute(CalibrateComputeSpec) -> ComputeCalibration``: compute durations from
  shapes (timed on a local accelerator, else the roofline), written as new files;
* ``compare_runs(a, b, store=...) -> RunComparison``: two stored runs' p50s side by side;
* ``write_report(ReportSpec) -> Report``: PNG/SVG/PDF plots, report.html, figures.json;
* ``run_sweep(SweepSpec) -> SweepResult``: one simulation over a grid of spec fields;
* ``load_workload(prefix)``, ``save_workload(workload, prefix)``: Chakra ET files.

A result's ``to_dict()`` (``doc()`` for emulate) is the JSON document the CLI prints with
``--json``. Names load on first use, so ``import genie`` stays fast.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Fabric": "genie.api.specs",
    "Model": "genie.api.specs",
    "Compute": "genie.api.specs",
    "Perturb": "genie.api.specs",
    "Job": "genie.api.specs",
    "SimulateSpec": "genie.api.specs",
    "EmulateSpec": "genie.api.specs",
    "Simulation": "genie.api.simulation",
    "simulate": "genie.api.simulation",
    "emulate": "genie.api.emulation",
    "Emulation": "genie.api.emulation",
    "BenchSpec": "genie.api.benchmark",
    "BenchResult": "genie.api.benchmark",
    "bench": "genie.api.benchmark",
    "Microbench": "genie.api.workload",
    "DataParallel": "genie.api.workload",
    "Transformer": "genie.api.workload",
    "MixtureOfExperts": "genie.api.workload",
    "Generated": "genie.api.workload",
    "generate": "genie.api.workload",
    "CalibrateSpec": "genie.api.calibration",
    "Calibration": "genie.calibration.model",
    "calibrate": "genie.api.calibration",
    "CalibrateComputeSpec": "genie.api.calibration",
    "ComputeCalibration": "genie.api.calibration",
    "calibrate_compute": "genie.api.calibration",
    "RunComparison": "genie.api.runs",
    "compare_runs": "genie.api.runs",
    "ReportSpec": "genie.api.report",
    "Report": "genie.report",
    "write_report": "genie.api.report",
    "Axis": "genie.api.sweep",
    "SweepSpec": "genie.api.sweep",
    "SweepRow": "genie.api.sweep",
    "SweepResult": "genie.api.sweep",
    "run_sweep": "genie.api.sweep",
    "NcclSpec": "genie.api.nccl",
    "NcclTable": "genie.api.nccl",
    "nccl_collective": "genie.api.nccl",
    "Placement": "genie.placement",
    "place": "genie.placement",
    "load_workload": "genie.workload",
    "save_workload": "genie.workload",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    """Load an API name from its module on first use."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'genie.api' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The API's names (for help() and completion)."""
    return sorted({*globals(), *__all__})
