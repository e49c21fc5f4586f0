"""Collective algorithms lowered to per-rank step programs, their executors and cost model.

Entry points: ``build_program`` plans a collective, ``program_from_bytes`` rebuilds a shipped
one, ``ALGORITHMS`` lists the algorithms of each collective. ``topology`` describes networks,
``cost`` prices programs on them and ``data_exec`` proves what they compute.
"""

from genie.collectives.program import Op, Program, ProgramSpec, Step
from genie.collectives.registry import (
    ALGORITHMS,
    COLLECTIVES,
    DEFAULT_ALGORITHM,
    build_program,
    canonical_algorithm,
    canonical_collective,
    program_from_bytes,
    program_from_spec,
)

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "DEFAULT_ALGORITHM",
    "Op",
    "Program",
    "ProgramSpec",
    "Step",
    "build_program",
    "canonical_algorithm",
    "canonical_collective",
    "program_from_bytes",
    "program_from_spec",
]
