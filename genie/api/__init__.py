"""genie's Python API: the library the ``genie`` command line is one client of.

Describe what to run with frozen, typed specs, call one function, read a typed result::

    import genie
    spec = genie.SimulateSpec(workload="/tmp/dp", fabric=genie.Fabric(bandwidth="100gbit"))
    sim = genie.simulate(spec)
    sim.iteration_s, sim.reports[0].collectives[0], sim.to_dict()

* specs (``genie.api.specs``): ``Fabric``, ``Model``, ``Compute``, ``Perturb``, ``Job``,
  ``SimulateSpec``, ``EmulateSpec``; each converts to and from plain data;
* ``simulate(SimulateSpec) -> Simulation``: replay over the analytical model, measured times or
  ASTRA-sim's models; one ``SimReport`` per backend (iteration time, per-rank breakdown,
  per-collective rows, busiest links, the backend that priced each number);
* ``emulate(EmulateSpec) -> Emulation``: the workload's communication on a testbed's agents,
  replayed with the measured times beside the models (``genie.api.emulate``);
* ``genie.placement.place``: the one rule that puts ranks on hosts.

``to_dict()`` of a result is the JSON document the CLI prints with ``--json``.
"""

from genie.api.simulate import Simulation, simulate
from genie.api.specs import (
    Compute,
    EmulateSpec,
    Fabric,
    Job,
    Model,
    Perturb,
    SimulateSpec,
)

__all__ = [
    "Compute",
    "EmulateSpec",
    "Fabric",
    "Job",
    "Model",
    "Perturb",
    "SimulateSpec",
    "Simulation",
    "simulate",
]
