"""A replay with stragglers or jitter beside the same workload without them.

``replay_perturbed`` replays the perturbed workload, and with a perturbation also the
unperturbed one, and puts on the report what the stragglers cost and who waited on whom
(``genie.sim.waits``), with the busiest links of the perturbed replay.
"""

from __future__ import annotations

from collections.abc import Callable

from genie.sim import perturb
from genie.sim.api import replay
from genie.sim.attribution import busiest_links
from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.network import NetworkBackend
from genie.sim.report import SimReport
from genie.sim.waits import straggler_cost, who_waited


def replay_perturbed(
    cw: CompiledWorkload,
    base: CompiledWorkload,
    backend: NetworkBackend,
    make_backend: Callable[[], NetworkBackend],
    pert: perturb.Perturbation,
    symmetry: bool,
) -> tuple[SimReport, RawResult]:
    """Replay ``cw`` (perturbed) over ``backend``; with a perturbation, also ``base`` (the same
    workload unperturbed) over a fresh ``make_backend()``, and put the straggler analysis on the
    report. Returns (report, raw result)."""
    rep, raw = replay(cw, backend, symmetry=symmetry)
    rep.links = busiest_links(backend, rep.iteration_s)
    if pert:
        base_rep, _ = replay(base, make_backend(), symmetry=symmetry)
        rep.stragglers = {
            "perturbation": pert.to_dict(),
            "described": pert.describe(),
            **straggler_cost(rep.iteration_s, base_rep.iteration_s),
            **who_waited(cw, raw),
        }
    return rep, raw
