"""Capture workloads from the compiler: lower a JAX program for N CPU devices, read the
collectives and compute out of its optimized HLO, write one Chakra ET per rank.

Public API: ``capture_jax(target, devices, mesh, out=..., cost=...)`` (runs jax in a
subprocess), ``capture_hlo_file(path, mesh, out=...)`` (an HLO text file, no jax),
``parse_hlo(text)``, ``hlo_to_workload(module, mesh=..., cost=...)``, ``CaptureCost``,
``jax_available()``. jax is only imported by ``genie.capture.jax_runner``, in its own
process; the entry-point convention is documented there.
"""

from genie.capture.api import (
    CaptureResult,
    capture_hlo_file,
    capture_jax,
    jax_available,
    parse_mesh,
)
from genie.capture.convert import CaptureCost, Conversion, hlo_to_workload
from genie.capture.hlo import HloModule, parse_hlo

__all__ = [
    "CaptureCost",
    "CaptureResult",
    "Conversion",
    "HloModule",
    "capture_hlo_file",
    "capture_jax",
    "hlo_to_workload",
    "jax_available",
    "parse_hlo",
    "parse_mesh",
]
