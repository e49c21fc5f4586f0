"""The models an emulate run is compared with, and how far each is from what the wire did.

``Models`` holds the testbed's nominal topology and, with a calibration, the calibrated one,
both as the run reports them (dilated when the run is: bandwidth x K, fixed times / K, which is
the lab's model / K). It prices single programs for the per-collective rows, gives the replay's
analytical backends (named after the model that priced them) and, for a dilated run, replays
the workload on a fabric K times faster that kept the lab's latency and overhead, to say how
much what dilation does not scale matters for this workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from genie.calibration.accuracy import ErrorRow
from genie.calibration.dilation import dilated_topology, dilation_note, kept_latency_topology
from genie.calibration.model import Calibration, calibrate_topology, nominal_reason
from genie.collectives.program import Program
from genie.collectives.topology import Topology
from genie.errors import GenieError
from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.network import AnalyticalBackend
from genie.sim.report import SimReport


@dataclass
class Models:
    """Nominal and calibrated topologies of a testbed as an emulate run reports them."""

    nominal: Topology
    calibrated: Topology | None
    lab: Topology  # the undilated model of the lab (calibrated when there is a calibration)
    calibration: Calibration | None
    k: float
    source: str  # what the nominal model prices, in words
    missing: str = ""  # why there is no calibrated model, when there is none

    @property
    def nominal_label(self) -> str:
        """Which model the nominal numbers come from."""
        dil = f", dilated x{self.k:g}" if self.k != 1 else ""
        return f"{self.source}{dil}"

    def price(self, program: Program, hosts: Sequence[str]) -> tuple[float | None, float | None]:
        """(nominal s, calibrated s) of one program alone (None where the model declines)."""
        from genie.collectives.cost import estimate

        out: list[float | None] = []
        for topo in (self.nominal, self.calibrated):
            try:
                out.append(None if topo is None else estimate(program, topo, list(hosts)).time_s)
            except GenieError:
                out.append(None)
        return out[0], out[1]

    def backends(
        self,
        placement: Sequence[str],
        n_ranks: int,
        algos: dict[str, str],
        chunks: int,
        splits: dict[int, np.ndarray] | None = None,
    ) -> list[AnalyticalBackend]:
        """Analytical replay backends: nominal, then calibrated (when there is one);
        ``splits``: the workload's all-to-all-v matrices (``Instances.splits``)."""
        from genie.sim.program_pricer import ProgramPricer

        nominal = ProgramPricer(self.nominal, placement, n_ranks, algos, chunks)
        nominal.use_splits(splits or {})
        out = [AnalyticalBackend(nominal, track_links=True)]
        if self.calibrated is not None and self.calibration is not None:
            pricer = ProgramPricer(self.calibrated, placement, n_ranks, algos, chunks)
            pricer.use_splits(splits or {})
            name = f"analytical ({self.calibration.label})"
            out.append(AnalyticalBackend(pricer, name=name, track_links=True))
        return out

    def dilation_note(
        self,
        cw: CompiledWorkload,
        placement: Sequence[str],
        algos: dict[str, str],
        chunks: int,
        symmetry: bool,
    ) -> str | None:
        """For a dilated run: what did not scale and how much it matters for the iteration."""
        if self.k == 1:
            return None
        from genie.sim.api import replay
        from genie.sim.program_pricer import ProgramPricer

        times = []
        for topo in (dilated_topology(self.lab, self.k), kept_latency_topology(self.lab, self.k)):
            pricer = ProgramPricer(topo, placement, cw.n_ranks, algos, chunks)
            pricer.use_splits(cw.instances.splits)
            rep, _ = replay(cw, AnalyticalBackend(pricer), symmetry=symmetry)
            times.append(rep.iteration_s)
        pct = (times[1] - times[0]) / times[0] * 100 if times[0] else 0.0
        model = self.calibration.label if self.calibration else f"nominal, {self.source}"
        return dilation_note(self.k, self.lab, model, [("iteration", pct)])


def models(
    topology: Topology,
    calibration: Calibration | None,
    k: float,
    source: str,
    asked: str = "none",
) -> Models:
    """The models of an emulate run on ``topology`` (see ``Models``); ``asked`` is what
    ``--calibration`` said (to say why there is no calibrated model)."""
    cal_topo = calibrate_topology(topology, calibration) if calibration else None
    lab = cal_topo if cal_topo is not None else topology
    missing = nominal_reason(asked)
    if k != 1:
        return Models(
            dilated_topology(topology, k),
            None if cal_topo is None else dilated_topology(cal_topo, k),
            lab,
            calibration,
            k,
            source,
            missing,
        )
    return Models(topology, cal_topo, lab, calibration, k, source, missing)


def iteration_row(reports: Sequence[SimReport], label: str = "iteration") -> ErrorRow:
    """The replay's iteration: measured times (first report) vs nominal vs calibrated."""
    return ErrorRow(
        label,
        None,
        reports[0].iteration_s,
        reports[1].iteration_s if len(reports) > 1 else None,
        reports[2].iteration_s if len(reports) > 2 else None,
    )


def last_comm_end_s(raw: RawResult) -> float | None:
    """When a replay's last communication instance ended, s (None when there is none): what
    the wire's makespan, from the common start to the last op's end, is comparable with."""
    return float(raw.inst_end.max()) if len(raw.inst_end) else None
