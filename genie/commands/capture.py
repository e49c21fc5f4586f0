"""``genie capture jax MODULE:FUNCTION --devices N --mesh dp=..,tp=.. --out PREFIX``: lower a
JAX program for N CPU devices and write its optimized HLO as one Chakra ET per rank.

The module defines FUNCTION and FUNCTION_inputs(mesh) -> (args, in_specs[, out_specs]); see
genie.capture.jax_runner. jax runs in a subprocess; install it with the ``capture`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from genie.commands import _args as A
from genie.errors import UsageError
from genie.units import format_bytes, format_seconds


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie capture jax``."""
    p = sub.add_parser(
        "capture", help="capture workloads from a compiler (JAX/XLA HLO -> Chakra ET)"
    )
    csub = p.add_subparsers(dest="capture_what", metavar="FRONTEND")
    j = csub.add_parser("jax", help="lower a JAX function for N CPU devices", description=__doc__)
    j.add_argument("target", help="MODULE:FUNCTION (MODULE dotted or a .py path)")
    j.add_argument(
        "--devices", type=A.integer(1, 65536), required=True, help="number of devices (ranks)"
    )
    j.add_argument("--mesh", help="mesh axes NAME=SIZE,... multiplying to --devices (default dp=N)")
    j.add_argument("--out", required=True, help="output prefix: writes <out>.<rank>.et")
    _cost_args(j)
    j.add_argument("--hlo", help="also write the optimized HLO text here")
    j.add_argument(
        "--timeout", type=A.real(0, 86400), default=600.0, help="seconds allowed for jax"
    )
    j.add_argument("--json", action="store_true", help="print the summary as JSON")
    j.set_defaults(func=run_jax)
    h = csub.add_parser(
        "hlo",
        help="convert an optimized HLO text file (no jax needed)",
        description="Convert compiled.as_text() or an XLA dump's *after_optimizations.txt; "
        "the rank count is the module's num_partitions.",
    )
    h.add_argument("file", help="HLO text file")
    h.add_argument("--mesh", help="mesh axes NAME=SIZE,... (names the process groups)")
    h.add_argument("--out", required=True, help="output prefix: writes <out>.<rank>.et")
    _cost_args(h)
    h.set_defaults(func=run_hlo)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _cost_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--peak-flops", type=A.real(0, 1e20), default="989e12", help="peak FLOP/s (H100 bf16)"
    )
    p.add_argument("--efficiency", type=A.real(0, 1), default=0.5, help="fraction of peak reached")
    p.add_argument(
        "--memory-bandwidth",
        type=A.bandwidth,
        default="3.35TB/s",
        help="for memory-bound ops (H100 HBM3)",
    )


def _cost(args: argparse.Namespace):
    from genie.capture.convert import CaptureCost

    if not (0 < args.efficiency <= 1):
        raise UsageError(f"--efficiency must be in (0, 1], got {args.efficiency}")
    if args.peak_flops <= 0:
        raise UsageError("--peak-flops must be > 0")
    return CaptureCost(args.peak_flops, args.efficiency, args.memory_bandwidth)


def run_hlo(args: argparse.Namespace) -> int:
    """Handle ``genie capture hlo``."""
    from genie.capture.api import capture_hlo_file

    conv = capture_hlo_file(args.file, args.mesh, out=args.out, cost=_cost(args))
    st = conv.stats[0]
    print(
        f"converted {args.file}: {conv.workload.n_ranks} ranks; rank 0: {st.compute_nodes} "
        f"compute nodes, {st.flops:.4g} FLOPs, {len(st.collectives)} communication ops"
    )
    for n in conv.notes:
        print(f"note: {n}")
    return 0


def run_jax(args: argparse.Namespace) -> int:
    """Handle ``genie capture jax``."""
    from genie import progress
    from genie.capture.api import capture_jax

    cost = _cost(args)
    with progress.stage(f"compiling {args.target} for {args.devices} CPU devices"):
        res = capture_jax(
            args.target, args.devices, args.mesh, out=args.out, cost=cost, timeout=args.timeout
        )
    if args.hlo:
        with open(args.hlo, "w") as f:
            f.write(res.hlo)
    summary = summarize_capture(res)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    s0 = summary["rank0"]
    print(f"captured {args.target}: {summary['ranks']} ranks, jax {res.jax_version}")
    print(
        f"rank 0: {s0['compute_nodes']} compute nodes, {s0['flops']:.4g} FLOPs from dots/convs "
        f"(XLA cost_analysis: {summary['xla_flops']:.4g} FLOPs incl. elementwise), "
        f"compute {format_seconds(s0['compute_s'])}"
    )
    for row in s0["collectives"]:
        print(
            f"  {row['count']} x {row['op']} {format_bytes(row['size'])} "
            f"group {row['pg_name'] or '(all ranks)'}"
        )
    for n in res.conversion.notes:
        print(f"note: {n}")
    print(f"wrote {len(res.files)} files to {args.out}.*")
    return 0


def summarize_capture(res) -> dict:
    """A JSON-ready summary: rank 0's FLOPs, collectives by kind, XLA's own figures."""
    wl = res.conversion.workload
    st = res.conversion.stats[0]
    counts = Counter((c.op, c.size, c.pg_name) for c in st.collectives)
    compute_s = sum(n.duration_s for n in wl.ranks[0].nodes if n.type == 4)
    return {
        "ranks": wl.n_ranks,
        "groups": {k: list(v) for k, v in wl.groups.items()},
        "xla_flops": res.cost_analysis.get("flops", float("nan")),
        "xla_bytes_accessed": res.cost_analysis.get("bytes accessed", float("nan")),
        "rank0": {
            "flops": st.flops,
            "compute_nodes": st.compute_nodes,
            "compute_s": compute_s,
            "collectives": [
                {"op": op, "size": size, "pg_name": pg, "count": k}
                for (op, size, pg), k in counts.items()
            ],
        },
        "notes": res.conversion.notes,
        "files": [str(f) for f in res.files],
    }
