"""``genie workload inspect|convert|generate|replicate|scale|slice|import``: look at, convert,
create, reshape and import Chakra workloads."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from genie.api.workload import (
    DataParallel,
    GenerateSpec,
    Microbench,
    MixtureOfExperts,
    Transformer,
    generate,
)
from genie.commands import _args as A
from genie.commands._workload_args import ARGS, KINDS
from genie.commands._workload_output import render_summary
from genie.errors import UsageError, WorkloadError
from genie.units import format_seconds


def register(subparsers) -> None:
    """Add the ``workload`` command group."""
    p = subparsers.add_parser("workload", help="inspect, convert and generate Chakra ET workloads")
    sub = p.add_subparsers(dest="workload_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    i = sub.add_parser("inspect", help="summarize a workload (<prefix>.<rank>.et files)")
    i.add_argument("prefix", help="path prefix, directory or one rank file")
    i.add_argument("--json", action="store_true", help="print machine-readable JSON")
    i.set_defaults(func=cmd_inspect)

    c = sub.add_parser("convert", help="convert between .et files and the readable JSON form")
    c.add_argument("input", help=".et file, workload prefix/directory, or .json file")
    c.add_argument("output", help=".json file, or .et file / prefix when the input is JSON")
    c.set_defaults(func=cmd_convert)

    _register_tools(sub)
    _register_import(sub)

    g = sub.add_parser("generate", help="write a synthetic workload as <out>.<rank>.et files")
    kinds = g.add_subparsers(dest="kind", metavar="KIND")
    g.set_defaults(func=lambda args: (g.print_help(), 2)[1])
    for kind, helptext in KINDS.items():
        k = kinds.add_parser(kind, help=helptext)
        k.add_argument(
            "--ranks", type=A.integer(1, 131072), required=True, help="number of ranks (NPUs)"
        )
        k.add_argument("--out", required=True, help="output prefix: writes <out>.<rank>.et")
        k.add_argument("--gz", action="store_true", help="write gzip-compressed .et.gz files")
        k.add_argument(
            "--for",
            dest="target",
            choices=("astra-sim", "genie"),
            default="astra-sim",
            help="astra-sim (default): files ASTRA-sim 2.0 runs too: process groups named 1..k "
            "(readable names kept as pg_desc metadata) with the matching comm-group JSON, and "
            "only collectives it runs; genie: readable group names, every collective type",
        )
        if kind != "microbench":
            k.add_argument(
                "--peak-flops",
                type=A.real(0, 1e20),
                default="989e12",
                help="GPU peak FLOP/s (H100 bf16)",
            )
            k.add_argument("--efficiency", type=A.real(0, 1), default=0.5, help="fraction of peak")
        ARGS[kind](k)
        k.set_defaults(func=cmd_generate)


def _register_tools(sub) -> None:
    """``replicate``, ``scale`` and ``slice`` (genie.workload.transform)."""
    r = sub.add_parser(
        "replicate", help="make one rank's trace into N SPMD ranks (peers, groups renumbered)"
    )
    r.add_argument("prefix", help="workload prefix, directory or one rank file")
    r.add_argument(
        "--ranks", type=A.integer(1, 131072), required=True, help="number of ranks to write"
    )
    r.add_argument(
        "--rank",
        type=A.integer(0, 131071),
        help="source rank (default: the file given, or the lowest)",
    )
    s = sub.add_parser("scale", help="multiply GPU compute durations by a factor")
    s.add_argument("prefix", help="workload prefix, directory or one rank file")
    s.add_argument(
        "--factor", type=A.real(0, 1e6), required=True, help="e.g. 0.5 for a GPU twice as fast"
    )
    s.add_argument("--cpu", action="store_true", help="scale CPU ops (is_cpu_op) too")
    c = sub.add_parser("slice", help="keep the first K iterations or a node-id range")
    c.add_argument("prefix", help="workload prefix, directory or one rank file")
    what = c.add_mutually_exclusive_group(required=True)
    what.add_argument("--iterations", type=A.integer(1, 10**6), help="keep the first K iterations")
    what.add_argument("--nodes", help="keep node ids A:B (A <= id < B)")
    c.add_argument(
        "--marker", default="ProfilerStep#", help="name prefix of iteration marker nodes"
    )
    for k, fn in ((r, cmd_replicate), (s, cmd_scale), (c, cmd_slice)):
        k.add_argument("--out", required=True, help="output prefix: writes <out>.<rank>.et")
        k.add_argument("--gz", action="store_true", help="write gzip-compressed .et.gz files")
        k.set_defaults(func=fn)


def _register_import(sub) -> None:
    """``import pytorch`` (genie.workload.pytorch_import)."""
    i = sub.add_parser("import", help="turn another tool's traces into a workload")
    kinds = i.add_subparsers(dest="import_kind", metavar="FORMAT")
    i.set_defaults(func=lambda args: (i.print_help(), 2)[1])
    p = kinds.add_parser(
        "pytorch",
        help="PyTorch execution traces (ExecutionTraceObserver JSON, optional Kineto traces)",
    )
    p.add_argument(
        "host", nargs="+", help="host execution trace(s), one per rank (rank from the name)"
    )
    p.add_argument(
        "--kineto",
        action="append",
        default=[],
        metavar="TRACE.json",
        help="Kineto device trace(s) for GPU kernel times and streams (repeat per rank)",
    )
    p.add_argument(
        "--ranks",
        type=A.integer(1, 131072),
        help="ranks to write from one rank's trace (default: the job's, from its process groups)",
    )
    p.add_argument(
        "--device",
        default="h100",
        help="roofline that prices GPU kernels when no Kineto trace times them (h100, h200, a100)",
    )
    p.add_argument("--out", required=True, help="output prefix: writes <out>.<rank>.et")
    p.add_argument("--gz", action="store_true", help="write gzip-compressed .et.gz files")
    p.set_defaults(func=cmd_import_pytorch)


def cmd_import_pytorch(args: argparse.Namespace) -> int:
    """Host (and Kineto) traces to Chakra ET files, replicated to the job's ranks."""
    from genie.api.workload import import_pytorch

    got = import_pytorch(args.host, args.kineto, args.ranks, args.device, Path(args.out).name)
    notes = list(got.notes)
    if got.replicated_from is not None:
        notes.append(
            f"ranks 0..{got.workload.n_ranks - 1} run rank {got.replicated_from}'s graph "
            "(one host trace given)"
        )
    _write(got.workload, args, _fold_ranks(notes), fold=True)
    return 0


def generate_spec(args: argparse.Namespace) -> GenerateSpec:
    """The generator spec of ``genie workload generate KIND``'s command line."""
    common = {"ranks": args.ranks}
    if args.kind != "microbench":
        common |= {"peak_flops": args.peak_flops, "efficiency": args.efficiency}
    if args.kind == "microbench":
        types = tuple(x.strip() for x in args.types.split(",") if x.strip()) if args.types else None
        return Microbench(
            sizes=tuple(args.sizes), types=types, iterations=args.iterations, **common
        )
    if args.kind == "dp":
        return DataParallel(
            layers=args.layers,
            hidden=args.hidden,
            seq=args.seq,
            batch=args.batch,
            bucket=args.bucket,
            **common,
        )
    if args.kind == "llm":
        return Transformer(
            tp=args.tp,
            pp=args.pp,
            layers=args.layers,
            hidden=args.hidden,
            seq=args.seq,
            micro_batches=args.micro_batches,
            micro_batch_size=args.micro_batch_size,
            zero=args.zero,
            **common,
        )
    return MixtureOfExperts(
        layers=args.layers,
        hidden=args.hidden,
        seq=args.seq,
        batch=args.batch,
        experts_per_rank=args.experts_per_rank,
        top_k=args.top_k,
        expert_skew=args.expert_skew,
        **common,
    )


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate, validate and write a workload (by default one ASTRA-sim runs too)."""
    gen = generate(generate_spec(args), args.target)
    for note in gen.notes:
        print(f"note: {note}", file=sys.stderr)
    files = _write(gen.workload, args, [], validated=True)
    if args.target == "astra-sim":
        if args.gz:
            print("note: ASTRA-sim reads uncompressed <prefix>.<rank>.et only", file=sys.stderr)
        else:
            side = [f for f in files if f.name.endswith(".json")]
            cg = f" --comm-group-configuration={side[0]}" if side else ""
            print(f"ASTRA-sim: --workload-configuration={args.out}{cg}")
    return 0


def _write(
    wl, args: argparse.Namespace, notes: list[str], validated: bool = False, fold: bool = False
) -> list[Path]:
    """Validate (unless done), write ``args.out``, say what was written (notes on stderr).

    ``fold``: a problem every rank has alike is said once for all of them (``replicate``).
    """
    from genie.workload import save_workload, validate_workload

    if not validated:
        for rg in wl.ranks:
            rg.source = ""  # problems found now are about the output, not the input files
        wl.problems = []
        validate_workload(wl)
    files = save_workload(wl, args.out, compress=args.gz)
    ext = ".et.gz" if args.gz else ".et"
    side = f" and {files[-1]}" if str(files[-1]).endswith(".json") else ""
    print(
        f"wrote {wl.n_ranks} rank files {args.out}.{{0..{wl.n_ranks - 1}}}{ext} "
        f"({wl.node_count()} nodes){side}"
    )
    for p in [*notes, *(_fold_ranks(wl.problems) if fold else wl.problems)]:
        print(f"note: {p}", file=sys.stderr)
    return files


_RANK_LINE = re.compile(r"^rank (\d+)(?: \([^)]*\))?: (.*)$")


def _fold_ranks(problems: list[str]) -> list[str]:
    """Per-rank problems that read alike but for the rank, as one line per problem."""
    ranks: dict[str, list[int]] = {}
    out: list[str | None] = []
    for p in problems:
        m = _RANK_LINE.match(p)
        if m is None:
            out.append(p)
            continue
        if m.group(2) not in ranks:
            ranks[m.group(2)] = []
            out.append(None)  # placeholder: the folded line goes where it first came
        ranks[m.group(2)].append(int(m.group(1)))
    folded = iter(
        f"rank {rs[0]}: {msg}" if len(rs) == 1 else f"ranks {_span(rs)} (each): {msg}"
        for msg, rs in ranks.items()
    )
    return [p if p is not None else next(folded) for p in out]


def _span(ranks: list[int]) -> str:
    """``0..7`` for consecutive ranks, else a comma list."""
    rs = sorted(ranks)
    if rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}..{rs[-1]}"
    return ", ".join(map(str, rs))


def cmd_replicate(args: argparse.Namespace) -> int:
    """One rank's trace as ``--ranks`` SPMD ranks."""
    from genie import progress
    from genie.workload.loader import load_rank
    from genie.workload.transform import replicate

    if args.ranks < 1:
        raise UsageError(f"--ranks must be >= 1, got {args.ranks}")
    rg, groups = load_rank(args.prefix, args.rank)
    with progress.bar("replicating", args.ranks, "ranks") as bar:
        advance = bar.advance
        wl = replicate(rg, rg.rank, groups, args.ranks, Path(args.out).name, advance)
    _write(wl, args, [f"ranks 0..{args.ranks - 1} run rank {rg.rank}'s graph"], fold=True)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    """Compute durations times ``--factor``."""
    from genie import progress
    from genie.workload import load_workload
    from genie.workload.transform import scale

    wl = load_workload(args.prefix)
    with progress.bar("scaling", wl.n_ranks, "ranks") as bar:
        advance = bar.advance
        done = scale(wl, args.factor, cpu=args.cpu, advance=advance)
    what = "compute nodes" if args.cpu else "GPU compute nodes"
    note = (
        f"scaled {done['nodes']} {what} by {args.factor:g}: "
        f"{format_seconds(done['before_us'] * 1e-6)} -> "
        f"{format_seconds(done['after_us'] * 1e-6)} summed over ranks (whole microseconds)"
    )
    _write(wl, args, [note])
    return 0


def cmd_slice(args: argparse.Namespace) -> int:
    """The first iterations or a node-id range of every rank."""
    from genie import progress
    from genie.workload import load_workload
    from genie.workload.transform import slice_iterations, slice_nodes

    lo = hi = 0
    if args.nodes is not None:
        try:
            a, b = args.nodes.split(":")
            lo, hi = int(a), int(b)
        except ValueError:
            raise UsageError(f"--nodes takes A:B (node ids), got {args.nodes!r}") from None
    wl = load_workload(args.prefix)
    with progress.bar("slicing", wl.n_ranks, "ranks") as bar:
        advance = bar.advance
        if args.iterations is not None:
            notes = slice_iterations(wl, args.iterations, args.marker, advance)
        else:
            notes = slice_nodes(wl, lo, hi, advance)
    _write(wl, args, notes)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a workload summary; problems are listed, not fatal."""
    from genie.workload import load_workload, summarize

    s = summarize(load_workload(args.prefix))
    if args.json:
        json.dump(s, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    render_summary(s)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Convert .et -> JSON or JSON -> .et, losslessly (Chakra JSON rank files -> .et too)."""
    from genie.workload.conversion import convert

    wrote, notes = convert(args.input, args.output)
    for p in notes:
        print(f"note: {p}", file=sys.stderr)
    for line in wrote:
        print(line)
    return 0


__all__ = ["WorkloadError", "cmd_convert", "cmd_inspect", "register"]
