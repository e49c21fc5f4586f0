"""One call from a compiled workload and a backend to a report, with the symmetric shortcut."""

from __future__ import annotations

from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult, simulate
from genie.sim.network import NetworkBackend
from genie.sim.report import SimReport, build_report
from genie.sim.symmetry import representatives


def replay(
    cw: CompiledWorkload, backend: NetworkBackend, symmetry: bool = True
) -> tuple[SimReport, RawResult]:
    """Replay ``cw`` over ``backend`` (one representative rank when provably symmetric)."""
    # a per-member backend must hear every rank, so it replays them all
    reps = representatives(cw) if symmetry and not backend.per_member else None
    raw = simulate(cw, backend, ranks=reps)
    return build_report(cw, raw, backend.standalone), raw


def makespan(cw: CompiledWorkload, backend: NetworkBackend, symmetry: bool = True) -> float:
    """The iteration time ``replay`` would report (its makespan), without building the report
    (nor the copies' standalone times an orbit replay fills in for it)."""
    reps = representatives(cw) if symmetry and not backend.per_member else None
    return simulate(cw, backend, ranks=reps, copy_standalone=False).makespan
