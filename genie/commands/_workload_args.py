"""The options of ``genie workload generate KIND``, one function per kind."""

from __future__ import annotations

import argparse

from genie.commands import _args as A

KINDS = {
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


ARGS = {"microbench": _args_microbench, "dp": _args_dp, "llm": _args_llm, "moe": _args_moe}
