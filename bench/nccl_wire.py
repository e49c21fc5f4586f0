"""NCCL-style ring all-reduce on a netns star: measured (``genie bench``) vs the model, per size.

Builds a star of network namespaces (prefix ``genie-nw-``, removed at the end, even on failure),
starts an agent in each, and runs ``genie.api.bench`` (what ``genie bench`` runs) of a ring
all-reduce NCCL-style (``--nccl-proto P --nccl-channels C``: C channels, each its own TCP
connection per peer, chunks of the protocol's size, its flag bytes on the wire) for every
protocol and channel count asked, printing per size the measured p50, the cost model's time of
the same program on the same star, measured / model and the bytes each rank puts on its link per
iteration as the model counts them (framing included) over the payload. The issue's band for
sizes >= 1 MiB is 0.90..1.10; the last lines say whether every row is in it.

    sudo .venv/bin/python bench/nccl_wire.py                   # simple/ll128/ll x 1/2/4 channels
    sudo .venv/bin/python bench/nccl_wire.py --protos ll --channels 2 --sizes 4MiB

Needs root (namespaces). Per-message CRC checks are on (as ``genie bench``'s default) unless
``--no-verify``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from genie.api.benchmark import BenchSpec, bench  # noqa: E402
from genie.collectives import build_program  # noqa: E402
from genie.collectives.cost import estimate  # noqa: E402
from genie.collectives.nccl_wire import PROTOCOLS, NcclStyle  # noqa: E402
from genie.testbed import load_testbed, netns  # noqa: E402
from genie.units import format_bytes, parse_size_sweep  # noqa: E402

PREFIX = "genie-nw-"
BAND = (0.90, 1.10)


@contextlib.contextmanager
def star(d: Path, hosts: int, rate: str) -> Iterator[Path]:
    """A netns star of ``hosts`` at ``rate`` with agents running (yields its file)."""
    os.environ.setdefault("GENIE_STATE_DIR", str(d / "genie-state"))
    path = d / "nccl-wire-star.toml"
    path.write_text(
        f'[testbed]\nname = "nccl-wire-star"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
        f'[topology]\nshape = "star"\nhosts = {hosts}\nrate = "{rate}"\n'
    )
    tb = load_testbed(path)
    try:
        netns.up(tb)
        netns.start_agents(tb)
        yield path
    finally:
        try:
            netns.down(tb)
        finally:
            netns.clean(prefix=PREFIX)


def wire_ratio(n: int, size: int, style: NcclStyle, topology) -> float:
    """Bytes the model puts on one host's up link over the ring's payload bytes there."""
    prog = build_program("all_reduce", "ring", n, size, size_convention="nccl", style=style)
    cost = estimate(prog, topology)
    payload = 2 * (n - 1) * size / n
    return max(cost.link_bytes.values()) / payload if payload else 1.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep and print the table and the verdict."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rate", default="200mbit", help="host link rate (default 200mbit)")
    ap.add_argument("--sizes", default="1MiB,4MiB,16MiB", help="sizes (default 1MiB,4MiB,16MiB)")
    ap.add_argument("--protos", default=",".join(PROTOCOLS), help="simple,ll128,ll")
    ap.add_argument("--channels", default="1,2,4", help="channel counts (default 1,2,4)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-verify", action="store_true", help="skip per-message CRC checks")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("nccl_wire: needs root (network namespaces)", file=sys.stderr)
        return 2
    sizes = parse_size_sweep(args.sizes)
    protos = [p.strip() for p in args.protos.split(",") if p.strip()]
    chans = [int(c) for c in args.channels.split(",") if c.strip()]
    print(
        f"ring all-reduce NCCL-style on a {args.hosts}-host netns star, links {args.rate} (tbf); "
        f"measured = genie bench p50 of {args.iters} iterations after {args.warmup} warm-up, "
        "model = genie's cost model of the same program on the same star; wire/payload = bytes "
        "on a host's up link per iteration (model, framing included) / the ring's payload"
    )
    print(f"{'proto':<7}{'ch':>3}{'size':>10}{'measured ms':>13}{'model ms':>10}{'ratio':>7}"
          f"{'wire/payload':>14}")  # fmt: skip
    ratios: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="nccl-wire-") as tmp,
        star(Path(tmp), args.hosts, args.rate) as path,
    ):
        topology = load_testbed(path).to_topology()
        for proto in protos:
            for c in chans:
                res = bench(
                    BenchSpec(
                        testbed=str(path),
                        sizes=tuple(sizes),
                        iters=args.iters,
                        warmup=args.warmup,
                        nccl_channels=c,
                        nccl_proto=proto,
                        verify=not args.no_verify,
                        repeats=1,
                        store=None,
                        progress=False,
                    )
                )
                for row in res.rows:
                    wr = wire_ratio(row.n_ranks, row.size, NcclStyle(c, proto), topology)
                    r = row.ratio
                    if r is not None and row.size >= 1 << 20:
                        ratios.append(r)
                    model = f"{row.modeled_s * 1e3:10.2f}" if row.modeled_s else f"{'-':>10}"
                    print(
                        f"{proto:<7}{c:>3}{format_bytes(row.size):>10}"
                        f"{row.stats.p50 * 1e3:13.2f}{model}"
                        f"{(f'{r:.3f}' if r else '-'):>7}{wr:14.3f}"
                    )
    if ratios:
        lo, hi = min(ratios), max(ratios)
        inside = all(BAND[0] <= r <= BAND[1] for r in ratios)
        print(
            f"measured / model at >= 1 MiB: {lo:.3f} .. {hi:.3f} over {len(ratios)} rows; band "
            f"{BAND[0]:.2f}..{BAND[1]:.2f}: {'all inside' if inside else 'NOT all inside'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
