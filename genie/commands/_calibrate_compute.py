"""``genie calibrate compute PREFIX --out NEW``: the spec and the report of a compute calibration.

The work is ``genie.api.calibrate_compute`` (read the workload, choose the timer: PyTorch on a
local accelerator, else the roofline; write the new files, never over the input); here: the
command line as a ``CalibrateComputeSpec`` and the printed report: per shape roofline vs timed,
and the compute time per rank before and after.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genie.api.calibration import CalibrateComputeSpec, ComputeCalibration


def spec_from_args(args: argparse.Namespace, source: str) -> CalibrateComputeSpec:
    """The ``CalibrateComputeSpec`` of ``genie calibrate compute SOURCE``'s command line."""
    from genie.api.calibration import CalibrateComputeSpec

    return CalibrateComputeSpec(
        workload=source,
        out=args.out or "",
        device=args.device,
        peak_flops=args.peak_flops,
        memory_bandwidth=args.memory_bandwidth,
        efficiency=args.efficiency,
    )


def render(res: ComputeCalibration) -> None:
    """Print what a compute calibration priced and wrote (120 columns when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    from genie.units import format_seconds

    rw = res.rewrite
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    how = (
        f"timed with {rw.timer}; roofline beside it: {rw.roofline}"
        if res.timed
        else f"no accelerator here (PyTorch with CUDA not found): durations from {rw.roofline}"
    )
    con.print(f"compute of {res.workload}: {how}", markup=False)
    said = ", ".join(f"{n} from {s}" for s, n in sorted(rw.sources.items()))
    con.print(f"compute nodes: {said}", markup=False)
    t = Table(title="per distinct operation", title_justify="left")
    for c in ("operation", "nodes", "FLOPs", "roofline", "timed", "timed/roofline"):
        t.add_column(c, justify="left" if c == "operation" else "right")
    for op in res.operations():
        timed = op.timed_s
        t.add_row(
            ("GEMM " if op.gemm else "") + op.operation,
            str(op.nodes),
            f"{op.flops:.3g}",
            format_seconds(op.roofline_s),
            "-" if timed is None else format_seconds(timed),
            "-" if timed is None else f"{timed / op.roofline_s:.2f}",
        )
    con.print(t)
    before, after = res.per_rank_s()
    con.print(
        f"compute per rank (mean): {format_seconds(before)} in the trace, "
        f"{format_seconds(after)} now; {len(rw.durations)} nodes rewritten",
        markup=False,
    )
    con.print(
        f"wrote {len(res.files)} files: {res.out}.*.et (the input is unchanged)", markup=False
    )


def run_compute(args: argparse.Namespace, source: str) -> int:
    """Handle ``genie calibrate compute``: parse -> spec -> ``calibrate_compute`` -> render."""
    from genie.api.calibration import calibrate_compute

    render(calibrate_compute(spec_from_args(args, source)))
    return 0
