"""``genie workload inspect|convert|generate|replicate|scale|slice``: look at, convert, create
and reshape Chakra workloads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from genie.commands import _args as A
from genie.errors import UsageError, WorkloadError
from genie.units import format_bytes, format_seconds


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

    g = sub.add_parser("generate", help="write a synthetic workload as <out>.<rank>.et files")
    kinds = g.add_subparsers(dest="kind", metavar="KIND")
    g.set_defaults(func=lambda args: (g.print_help(), 2)[1])
    for kind, helptext in _KINDS.items():
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
        _ARGS[kind](k)
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


_KINDS = {
    "microbench": "each collective type over a size sweep",
    "dp": "data-parallel training step, gradient all-reduce buckets overlapping backward",
    "llm": "transformer step with tensor, pipeline and data parallelism (optional ZeRO)",
    "moe": "mixture-of-experts step with all-to-all",
}


def _args_microbench(k: argparse.ArgumentParser) -> None:
    k.add_argument(
        "--sizes", type=A.sweep, default="1KiB:16MiB:x4", help="size sweep (MIN:MAX:xF or A,B)"
    )
    k.add_argument(
        "--types",
        help="comma-separated collective types, or 'all' (default: all_reduce, all_gather, "
        "reduce_scatter, all_to_all, and with --for genie broadcast and reduce too)",
    )
    k.add_argument(
        "--iterations", type=A.integer(1, 1000000), default=1, help="repetitions of the sweep"
    )


def _args_dp(k: argparse.ArgumentParser) -> None:
    k.add_argument("--layers", type=A.integer(1, 10000), default=12, help="transformer layers")
    k.add_argument(
        "--hidden", type=A.integer(1, 1048576), default=2048, help="hidden size (model width)"
    )
    k.add_argument(
        "--seq", type=A.integer(1, 16777216), default=1024, help="sequence length (tokens)"
    )
    k.add_argument("--batch", type=A.integer(1, 1048576), default=8, help="samples per rank")
    k.add_argument(
        "--bucket",
        type=A.size(1, 1 << 40),
        default="25MiB",
        help="gradient bucket size (PyTorch DDP: 25MiB)",
    )


def _args_llm(k: argparse.ArgumentParser) -> None:
    k.add_argument("--tp", type=A.integer(1, 65536), default=2, help="tensor-parallel degree")
    k.add_argument("--pp", type=A.integer(1, 65536), default=2, help="pipeline-parallel stages")
    k.add_argument("--layers", type=A.integer(1, 10000), default=8, help="transformer layers")
    k.add_argument(
        "--hidden", type=A.integer(1, 1048576), default=4096, help="hidden size (model width)"
    )
    k.add_argument(
        "--seq", type=A.integer(1, 16777216), default=2048, help="sequence length (tokens)"
    )
    k.add_argument(
        "--micro-batches",
        type=A.integer(1, 65536),
        default=4,
        help="micro-batches per step (pipeline)",
    )
    k.add_argument(
        "--micro-batch-size", type=A.integer(1, 1048576), default=1, help="samples per micro-batch"
    )
    k.add_argument("--zero", action="store_true", help="reduce-scatter + all-gather (ZeRO/FSDP)")


def _args_moe(k: argparse.ArgumentParser) -> None:
    k.add_argument("--layers", type=A.integer(1, 10000), default=4, help="transformer layers")
    k.add_argument(
        "--hidden", type=A.integer(1, 1048576), default=2048, help="hidden size (model width)"
    )
    k.add_argument(
        "--seq", type=A.integer(1, 16777216), default=2048, help="sequence length (tokens)"
    )
    k.add_argument("--batch", type=A.integer(1, 1048576), default=4, help="samples per rank")
    k.add_argument(
        "--experts-per-rank", type=A.integer(1, 4096), default=2, help="experts on each rank"
    )
    k.add_argument("--top-k", type=A.integer(1, 4096), default=2, help="experts each token goes to")
    k.add_argument(
        "--expert-skew",
        type=A.real(0, 10, lo_open=False),
        default=0.0,
        help="expert-load skew: Zipf exponent of expert popularity (0 even; 1: expert e draws "
        "1/(e+1) of the share): uneven all-to-alls (all-to-all-v) and busier hot experts",
    )


_ARGS = {"microbench": _args_microbench, "dp": _args_dp, "llm": _args_llm, "moe": _args_moe}


def _microbench_types(args: argparse.Namespace) -> list:
    """The collective types asked for; for ASTRA-sim, those it runs (or a UsageError)."""
    from genie.workload.astra import RUNNABLE, why_not
    from genie.workload.generators.microbench import DEFAULT_TYPES
    from genie.workload.model import CollectiveType

    astra = getattr(args, "target", "genie") == "astra-sim"
    if args.types is None:
        if not astra:
            return list(DEFAULT_TYPES)
        left = ", ".join(t.name.lower() for t in DEFAULT_TYPES if t not in RUNNABLE)
        print(f"note: --for astra-sim leaves out {left} (--for genie keeps them)", file=sys.stderr)
        return list(RUNNABLE)
    names = [x.strip().upper() for x in args.types.split(",") if x.strip()]
    if names == ["ALL"]:
        return list(RUNNABLE) if astra else list(CollectiveType)
    try:
        types = [CollectiveType[x] for x in names]
    except KeyError as exc:
        known = ", ".join(t.name.lower() for t in CollectiveType)
        raise UsageError(f"unknown collective type {exc.args[0]!r} (known: {known})") from None
    if astra:
        bad = [f"{t.name.lower()} (ASTRA-sim {why_not(t)})" for t in types if why_not(t)]
        if bad:
            raise UsageError(
                f"--for astra-sim: {'; '.join(bad)}; leave them out or give --for genie"
            )
    return types


def build_generated(args: argparse.Namespace):
    """Call the generator named by ``args.kind`` with the parsed options."""
    from genie.workload.generators import data_parallel, llm, microbench, moe

    n = args.ranks
    if args.kind == "microbench":
        return microbench(n, args.sizes, _microbench_types(args), args.iterations)
    common = {"peak_flops": args.peak_flops, "efficiency": args.efficiency}
    if args.kind == "dp":
        return data_parallel(
            n,
            args.layers,
            args.hidden,
            args.seq,
            args.batch,
            bucket_bytes=args.bucket,
            **common,
        )
    if args.kind == "llm":
        dp = n // max(1, args.tp * args.pp)
        rs_ag = args.target == "astra-sim" and args.tp > 1 and dp > 1 and not args.zero
        if rs_ag:
            print(
                "note: --for astra-sim: the DP gradient all-reduce is written as reduce-scatter "
                "+ all-gather (the same ring steps and bytes); ASTRA-sim 2.0 crashes when a rank "
                "runs all-reduce in both its TP and its DP group (--for genie keeps all-reduce)",
                file=sys.stderr,
            )
        return llm(
            n,
            args.tp,
            args.pp,
            args.layers,
            args.hidden,
            args.seq,
            args.micro_batches,
            args.micro_batch_size,
            zero=args.zero,
            dp_sync="rs_ag" if rs_ag else "all_reduce",
            **common,
        )
    if args.expert_skew and args.target == "astra-sim":
        print(
            "note: --for astra-sim: ASTRA-sim reads each rank's all-to-all as an even one of its "
            "own comm_size; genie reads the per-peer sizes (comm_split_sizes)",
            file=sys.stderr,
        )
    return moe(
        n,
        args.layers,
        args.hidden,
        args.seq,
        args.batch,
        args.experts_per_rank,
        args.top_k,
        expert_skew=args.expert_skew,
        **common,
    )


MAX_GENERATED_NODES = 20_000_000  # about 6 GB of memory while generating


def estimated_nodes(args: argparse.Namespace) -> int:
    """An upper bound on the nodes the generator will build (checked before building)."""
    n = args.ranks
    if args.kind == "microbench":
        types = len(args.types.split(",")) if args.types else 10
        return n * (len(args.sizes) * types * args.iterations + 1)
    if args.kind == "dp":
        return n * (6 * args.layers + 2)
    if args.kind == "llm":
        per_stage = -(-args.layers // args.pp)
        return n * (9 * args.micro_batches * per_stage + 4 * per_stage + 4 * args.micro_batches + 8)
    return n * (10 * args.layers + 2)


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate, validate and write a workload (by default one ASTRA-sim runs too)."""
    from genie import progress
    from genie.workload import validate_workload

    if args.ranks < 1:
        raise UsageError(f"--ranks must be >= 1, got {args.ranks}")
    est = estimated_nodes(args)
    if est > MAX_GENERATED_NODES:
        raise UsageError(
            f"{args.kind} with these options makes about {est:,} nodes, more than "
            f"{MAX_GENERATED_NODES:,}: use fewer ranks, layers or micro-batches"
        )
    with progress.stage(f"generating {args.kind} for {args.ranks} ranks"):
        wl = build_generated(args)
    if args.target == "astra-sim":
        from genie.workload.astra import astra_problems, to_integer_groups

        to_integer_groups(wl)
    with progress.stage(f"validating {wl.node_count():,} nodes"):
        validate_workload(wl)
    if args.target == "astra-sim":
        left = astra_problems(wl)
        if left:  # a generator that breaks ASTRA-sim's rules is a bug, not bad input
            raise RuntimeError(f"generated workload breaks ASTRA-sim's rules: {left}")
    files = _write(wl, args, [], validated=True)
    if args.target == "astra-sim":
        if args.gz:
            print("note: ASTRA-sim reads uncompressed <prefix>.<rank>.et only", file=sys.stderr)
        else:
            side = [f for f in files if f.name.endswith(".json")]
            cg = f" --comm-group-configuration={side[0]}" if side else ""
            print(f"ASTRA-sim: --workload-configuration={args.out}{cg}")
    return 0


def _write(wl, args: argparse.Namespace, notes: list[str], validated: bool = False) -> list[Path]:
    """Validate (unless done), write ``args.out``, say what was written (notes on stderr)."""
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
    for p in [*notes, *wl.problems]:
        print(f"note: {p}", file=sys.stderr)
    return files


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
    _write(wl, args, [f"ranks 0..{args.ranks - 1} run rank {rg.rank}'s graph"])
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
    _render(s)
    return 0


def _render(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from genie.workload.summary import reading_notes

    con = Console()
    con.print(
        f"[bold]{s['name'] or 'workload'}[/]: {s['ranks']} ranks, {s['nodes']} nodes "
        f"({', '.join(f'{k} {v}' for k, v in s['nodes_by_kind'].items() if v)})"
    )
    if s["collectives"]:
        t = Table(title="Collectives (all ranks)")
        for col in ("type", "comm_size (bytes)", "MiB (2^20 B)", "group", "nodes"):
            t.add_column(col, justify="right" if col != "type" else "left")
        for c in s["collectives"]:
            pg = c["pg_name"]
            desc = s["group_desc"].get(pg)
            t.add_row(
                c["type"],
                str(c["comm_size_bytes"]),
                f"{c['comm_size_MiB']:.3f}",
                (f"{pg} ({desc})" if desc else pg) or "<default>",
                str(c["nodes"]),
            )
        con.print(t)
    con.print(
        f"collective bytes {format_bytes(s['collective_bytes'])}, "
        f"send bytes {format_bytes(s['send_bytes'])}"
    )
    con.print(
        f"compute time: {format_seconds(s['compute_s_total'])} total over ranks, "
        f"{format_seconds(s['compute_s_max_rank'])} on the busiest rank"
    )
    con.print(
        f"critical path: {format_seconds(s['critical_path_s'])} ([dim]{s['critical_path_note']}[/])"
    )
    named = {k: v for k, v in s["groups"].items() if k != "<default>"}
    if named:
        con.print(f"process groups: {len(named)} named besides the default group of all ranks")
    for line in reading_notes(s["dropped"], s["nodes_by_kind"].get("host", 0)):
        con.print(line, markup=False, highlight=False)
    if s["astra_sim"]:
        con.print("ASTRA-sim 2.0 would not run these files as they are:")
        for line in s["astra_sim"]:
            con.print(f"  - {line}", markup=False, highlight=False)
    else:
        con.print("ASTRA-sim 2.0: runs these files as they are (genie.workload.astra)")
    if s["problems"]:
        con.print(f"[yellow]problems ({len(s['problems'])}):[/]")
        for p in s["problems"][:50]:
            con.print(f"  - {p}", markup=False, highlight=False)
        if len(s["problems"]) > 50:
            con.print(f"  ... and {len(s['problems']) - 50} more (see --json)")
    else:
        con.print("problems: none (collective sequences match across each group's ranks)")


def _is_et_file(p: Path) -> bool:
    return p.name.endswith(".et") or p.name.endswith(".et.gz")


def _is_genie_json(p: Path) -> bool:
    """Whether a .json file is genie's own JSON form (else: Chakra's jsonizer output)."""
    from genie.workload.json_form import FORMAT

    try:
        with p.open("rb") as f:
            return FORMAT.encode() in f.read(200)
    except OSError:
        return False


def cmd_convert(args: argparse.Namespace) -> int:
    """Convert .et -> JSON or JSON -> .et, losslessly (Chakra JSON rank files -> .et too)."""
    from genie.workload.et_codec import read_trace, write_trace
    from genie.workload.json_form import read_json, write_json
    from genie.workload.loader import _RANK_RE, load_workload, save_workload
    from genie.workload.model import RankGraph, Workload

    src, dst = Path(args.input), Path(args.output)
    m = _RANK_RE.match(src.name)
    chakra_json = bool(m) and m.group("ext") == "json" and not _is_genie_json(src)
    if chakra_json and not dst.name.endswith(".json"):
        wl = load_workload(src, validate=False)  # <prefix>.<rank>.json from chakra_jsonizer
        files = save_workload(wl, dst)
        print(f"wrote {len(files)} files: {files[0]} ...")
        return 0
    if src.name.endswith(".json") and not chakra_json:
        wl = read_json(src)
        if _is_et_file(dst):
            if len(wl.ranks) != 1:
                raise UsageError(
                    f"{src} holds {len(wl.ranks)} ranks; give an output prefix, not one .et file"
                )
            dst.parent.mkdir(parents=True, exist_ok=True)
            write_trace(dst, wl.ranks[0].metadata, wl.ranks[0].nodes)
            print(f"wrote {dst}")
        else:
            files = save_workload(wl, dst)
            print(f"wrote {len(files)} files: {files[0]} ...")
        return 0
    if not dst.name.endswith(".json"):
        raise UsageError(f"output {dst} must end in .json when the input is Chakra ET")
    if src.is_file() and _is_et_file(src):
        meta, nodes, problems = read_trace(src)
        m = _RANK_RE.match(src.name)
        rank = int(m.group("rank")) if m else 0
        wl = Workload(ranks=[], problems=problems, name=m.group("stem") if m else src.stem)
        wl.ranks.append(RankGraph(rank=rank, nodes=nodes, metadata=meta, source=str(src)))
        wl.groups = {}
    else:
        wl = load_workload(src, validate=False)
    write_json(wl, dst)
    for p in wl.problems:
        print(f"note: {p}", file=sys.stderr)
    print(f"wrote {dst} ({wl.node_count()} nodes, {len(wl.ranks)} ranks)")
    return 0


__all__ = ["WorkloadError", "cmd_convert", "cmd_inspect", "register"]
