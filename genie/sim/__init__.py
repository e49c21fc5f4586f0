"""Discrete-event replay of a workload's per-rank DAGs over network backends, and its reports.

Pieces (each its own module):

* ``compiled``: the engine's own compact form (per-rank numpy arrays, CSR deps, communication
  instances matched across ranks); ``GraphBuilder`` builds it directly;
* ``adapter``: ``compile_workload(genie.workload.Workload, ComputeModel)`` and ``load_workload``;
* ``engine``: ``simulate(compiled, backend, ranks=None) -> RawResult`` (semantics in its docstring);
* ``network``: the backend interface (``start`` / ``next_time`` / ``pop``), ``AnalyticalBackend``
  (fluid max-min link sharing over a pricer) and ``CalibratedPricer``;
* pricers: ``program_pricer.ProgramPricer`` (step programs priced by ``genie.collectives.cost``,
  the default), ``topo_pricer.TopologyPricer`` and ``netmodel.NetModel`` (built-in traffic model);
* ``measured``: ``MeasuredTable`` (from a ``genie bench`` run or JSON) and ``MeasuredBackend``;
* ``emulate``: isolated hardware in the loop (each distinct collective run on live agents);
* ``symmetry``: proof that ranks are identical, so one representative is replayed;
* ``report``: ``build_report`` (iteration, per-rank breakdown, per-collective table) and
  ``chrome_trace``; ``api.replay(compiled, backend)`` ties it together.
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
