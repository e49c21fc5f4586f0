"""``genie nccl``: one collective over sizes, priced as NCCL would run it on a GPU cluster.

Prints per size the algorithm (ring, tree; p2p for all-to-all and send/recv) and protocol (LL,
LL128, Simple) NCCL's rule picks (the lowest time as its tuner predicts it), its latency, time,
algbw and busbw (GB/s = 10^9 B/s, nccl-tests' definitions); ``--all`` every candidate weighed.
Sizes are nccl-tests' (the whole buffer). The model: genie.collectives.nccl_model,
docs/nccl-model.md.
"""

from __future__ import annotations

import argparse

from genie.commands import _args as A


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie nccl``."""
    from genie.collectives.gpu_presets import PRESETS
    from genie.collectives.nccl_model import COLLECTIVES

    p = sub.add_parser(
        "nccl", help="price one collective over sizes with the NCCL-like model", description=__doc__
    )
    p.add_argument("collective", choices=COLLECTIVES)
    p.add_argument("sizes", help="sizes: 1MiB, 8,1K,1M or a sweep MIN:MAX:xFACTOR")
    p.add_argument("--gpu", choices=tuple(PRESETS), default="h100", help="server preset")
    p.add_argument("--nodes", type=A.integer(1, 100000), default=1, help="servers")
    p.add_argument(
        "--gpus-per-node", type=A.integer(1, 1024), help="GPUs used per server (preset's)"
    )
    p.add_argument(
        "--net-bandwidth", type=A.bandwidth, help="a node's NICs together, line rate (preset's)"
    )
    p.add_argument("--intra-bandwidth", type=A.bandwidth, help="a GPU's intra-node bus (preset's)")
    p.add_argument("--channels", type=A.integer(1, 64), help="NCCL channels (preset's)")
    p.add_argument("--nccl-algo", help="as NCCL_ALGO: ring, tree, ^tree")
    p.add_argument("--nccl-proto", help="as NCCL_PROTO: LL, LL128, Simple, ^LL128")
    p.add_argument("--nccl-version", help="the NCCL release whose tuner constants price it")
    p.add_argument("--all", action="store_true", help="every candidate, not only the choice")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``genie nccl``: parse -> ``NcclSpec`` -> ``nccl_collective`` -> render."""
    import json
    import sys

    from rich.console import Console

    from genie.api.nccl import NcclSpec, nccl_collective
    from genie.commands._nccl_output import print_sizes
    from genie.units import parse_size_sweep

    spec = NcclSpec(
        collective=args.collective,
        sizes=tuple(parse_size_sweep(args.sizes)),
        gpu=args.gpu,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        net_bandwidth=args.net_bandwidth,
        intra_bandwidth=args.intra_bandwidth,
        channels=args.channels,
        algorithms=args.nccl_algo,
        protocols=args.nccl_proto,
        nccl_version=args.nccl_version,
    )
    table = nccl_collective(spec)
    if args.json:
        print(json.dumps(table.to_dict(), indent=2))
        return 0
    con = Console(width=None if sys.stdout.isatty() else 120)
    con.print(f"[bold]system[/] {args.gpu}: {table.system.describe()}")
    title = f"{args.collective} on {table.system.n_ranks} GPUs (NCCL-like model"
    title += "; * = chosen)" if args.all else ")"
    print_sizes(con, title, table.candidates, args.all)
    return 0
