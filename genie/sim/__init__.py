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

The live path (the trace's communication run on agents) is ``genie.live``.
"""

from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload, GraphBuilder, Kind
from genie.sim.engine import RawResult, simulate
from genie.sim.measured import MeasuredBackend, MeasuredTable
from genie.sim.network import AnalyticalBackend, CalibratedPricer, Demand, Transfer
from genie.sim.report import SimReport, build_report, chrome_trace

__all__ = [
    "AnalyticalBackend",
    "CalibratedPricer",
    "CompiledWorkload",
    "ComputeModel",
    "Demand",
    "GraphBuilder",
    "Kind",
    "MeasuredBackend",
    "MeasuredTable",
    "RawResult",
    "SimReport",
    "Transfer",
    "build_report",
    "chrome_trace",
    "compile_workload",
    "load_workload",
    "replay",
    "simulate",
]
