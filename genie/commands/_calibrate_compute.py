"""``genie calibrate compute PREFIX --out NEW``: the I/O and report of a compute calibration.

The pricing is ``genie.calibration.compute``; here: read the workload, choose the timer (PyTorch
on a local accelerator, else the roofline, and say which), write the new files (never over the
input) and print per shape roofline vs timed, and the compute time per rank before and after.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from genie import progress
from genie.errors import UsageError


def _out_prefix(src: Path, out: str | None) -> Path:
    """The new prefix: never the input's, never over existing rank files."""
    from genie.workload.loader import find_rank_files

    if not out:
        raise UsageError(
            "genie calibrate compute needs --out NEW_PREFIX (files are never rewritten in place)"
        )
    new = Path(out)
    prefix, _ = find_rank_files(src)
    if new.resolve() == prefix.resolve():
        raise UsageError(f"--out {out} is the input's own prefix: choose a new one")
    clash = sorted(new.parent.glob(f"{new.name}.*.et*")) if new.parent.is_dir() else []
    if clash:
        raise UsageError(f"{clash[0]} exists: choose a new --out prefix (nothing is overwritten)")
    return new


def run_compute(args: argparse.Namespace, source: str) -> int:
    """Handle ``genie calibrate compute``."""
    from rich.console import Console
    from rich.table import Table

    from genie.calibration.compute import DEVICES, Gemm, Roofline, apply, rewrite, torch_timer
    from genie.units import format_seconds
    from genie.workload import load_workload, save_workload

    src = Path(source)
    new = _out_prefix(src, args.out)
    device = (args.device or "h100").lower()
    if device not in DEVICES:
        raise UsageError(f"--device {args.device!r}: one of {', '.join(DEVICES)}")
    peak, mem = DEVICES[device]
    roof = Roofline(
        args.peak_flops or peak,
        args.memory_bandwidth or mem,
        args.efficiency or 1.0,
        device if not (args.peak_flops or args.memory_bandwidth) else "",
    )
    timer = torch_timer()
    with progress.stage(f"reading {src}") as st:
        wl = load_workload(src)
        st.describe("pricing the compute nodes")
        rw = rewrite(wl, roof, timer)
        apply(wl, rw)
        st.describe(f"writing {new}")
        written = save_workload(wl, new)
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    how = (
        f"timed with {rw.timer}; roofline beside it: {rw.roofline}"
        if timer
        else f"no accelerator here (PyTorch with CUDA not found): durations from {rw.roofline}"
    )
    con.print(f"compute of {wl.name}: {how}", markup=False)
    said = ", ".join(f"{n} from {s}" for s, n in sorted(rw.sources.items()))
    con.print(f"compute nodes: {said}", markup=False)
    t = Table(title="per distinct operation", title_justify="left")
    for c in ("operation", "nodes", "FLOPs", "roofline", "timed", "timed/roofline"):
        t.add_column(c, justify="left" if c == "operation" else "right")
    for op, d in sorted(rw.shapes.items(), key=lambda kv: -kv[1]["roofline_s"] * kv[1]["count"]):
        timed = d["timed_s"]
        t.add_row(
            ("GEMM " if isinstance(op, Gemm) else "") + op.label(),
            str(d["count"]),
            f"{op.flops:.3g}",
            format_seconds(d["roofline_s"]),
            "-" if timed is None else format_seconds(timed),
            "-" if timed is None else f"{timed / d['roofline_s']:.2f}",
        )
    con.print(t)
    old, now = rw.totals()
    per = max(1, wl.n_ranks)
    con.print(
        f"compute per rank (mean): {format_seconds(old / per)} in the trace, "
        f"{format_seconds(now / per)} now; {len(rw.durations)} nodes rewritten",
        markup=False,
    )
    con.print(f"wrote {len(written)} files: {new}.*.et (the input is unchanged)", markup=False)
    return 0
