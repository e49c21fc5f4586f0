"""Discrete-event replay of a workload's per-rank DAGs over network backends, and its reports.

A pure model: it imports no controller, agent, store or CLI code (``tests/test_architecture``).
Pieces (each its own module):

* ``compiled``: the engine's own compact form (per-rank numpy arrays, CSR deps, communication
  instances matched across ranks); ``GraphBuilder`` builds it directly;
* ``adapter``: ``compile_workload(genie.workload.Workload, ComputeModel)`` and ``load_workload``;
* ``engine``: ``simulate(compiled, backend, ranks=None) -> RawResult`` (semantics in its docstring);
* ``network``: the backend interface (``start`` / ``next_time`` / ``pop``), ``AnalyticalBackend``
  (fluid max-min link sharing over a pricer), ``FixedTimeBackend``, ``ZeroNetwork``, and the
  pricer family's base ``CachedPricer`` with ``CalibratedPricer``;
* pricers: ``program_pricer.ProgramPricer`` (step programs priced by ``genie.collectives.cost``,
  the default) and ``traffic.TopologyPricer`` / ``traffic.NetModel`` (built-in traffic model);
* ``measured``: ``MeasuredTable`` (from a ``genie bench`` run's rows or JSON) and
  ``MeasuredBackend``;
* ``symmetry``: proof that ranks are identical, so one representative is replayed;
* ``report``: ``build_report`` (iteration, per-rank breakdown, per-collective table) and
  ``chrome_trace``; ``api.replay(compiled, backend)`` ties it together.

The live path (the trace's communication run on agents) is ``genie.live``. The names above load
on first use (importing the package loads none of its modules).
"""

from __future__ import annotations

import importlib

# each name's module, loaded on first use: importing one submodule (``genie.sim.perturb``, the
# ASTRA-sim files' reader) runs this package, which then loads nothing else (start-up)
_WHERE = {
    "AnalyticalBackend": "genie.sim.network",
    "CalibratedPricer": "genie.sim.network",
    "CompiledWorkload": "genie.sim.compiled",
    "ComputeModel": "genie.sim.adapter",
    "Demand": "genie.sim.network",
    "GraphBuilder": "genie.sim.compiled",
    "Kind": "genie.sim.compiled",
    "MeasuredBackend": "genie.sim.measured",
    "MeasuredTable": "genie.sim.measured",
    "RawResult": "genie.sim.engine",
    "SimReport": "genie.sim.report",
    "Transfer": "genie.sim.network",
    "build_report": "genie.sim.report",
    "chrome_trace": "genie.sim.report",
    "compile_workload": "genie.sim.adapter",
    "load_workload": "genie.sim.adapter",
    "replay": "genie.sim.api",
    "simulate": "genie.sim.engine",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    """Load a public name's module on first use (see ``_WHERE``)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'genie.sim' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The package's public names (for help() and completion)."""
    return sorted({*globals(), *__all__})
