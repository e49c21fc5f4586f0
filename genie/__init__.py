"""genie: a hardware-in-the-loop network emulation testbed for distributed ML.

The library is the product and the ``genie`` command line one client of it. Simulate one
workload on three fabrics and compare::

    import genie

    wl = genie.generate(genie.DataParallel(ranks=8, layers=4))
    genie.save_workload(wl.workload, "/tmp/dp")
    for bw in ("100gbit", "200gbit", "400gbit"):
        fabric = genie.Fabric(topology="switch", bandwidth=bw)
        sim = genie.simulate(genie.SimulateSpec(workload="/tmp/dp", fabric=fabric))
        print(bw, sim.iteration_s, sim.reports[0].mean("exposed_comm"))

Specs are frozen and typed (``Fabric``, ``Model``, ``Compute``, ``Perturb``, ``Job``,
``SimulateSpec``, ``EmulateSpec``, ``BenchSpec``, the generators, ``CalibrateSpec``,
``CalibrateComputeSpec``, ``ReportSpec``, ``SweepSpec``); ``simulate``, ``emulate``, ``bench``,
``generate``, ``calibrate``, ``calibrate_compute``, ``write_report`` and ``run_sweep`` take
them (``compare_runs`` two run ids) and return typed results whose ``to_dict()`` (``doc()``)
is the JSON the CLI prints. See ``genie.api`` and docs/api.md. Names load on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = (
    "Axis",
    "BenchResult",
    "BenchSpec",
    "CalibrateComputeSpec",
    "CalibrateSpec",
    "Calibration",
    "Compute",
    "ComputeCalibration",
    "DataParallel",
    "EmulateSpec",
    "Emulation",
    "Fabric",
    "Generated",
    "Job",
    "MixtureOfExperts",
    "Microbench",
    "Model",
    "Perturb",
    "Placement",
    "Report",
    "ReportSpec",
    "RunComparison",
    "SimulateSpec",
    "Simulation",
    "SweepResult",
    "SweepRow",
    "SweepSpec",
    "Transformer",
    "bench",
    "calibrate",
    "calibrate_compute",
    "compare_runs",
    "load_workload",
    "save_workload",
    "emulate",
    "generate",
    "place",
    "run_sweep",
    "simulate",
    "write_report",
)

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    """Load an API name (``genie.api``) on first use: ``import genie`` stays fast."""
    if name not in _API:
        raise AttributeError(f"module 'genie' has no attribute {name!r}")
    value: object = getattr(importlib.import_module("genie.api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The API's names (for help() and completion)."""
    return sorted({*globals(), *__all__})
