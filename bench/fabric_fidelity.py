"""Fidelity of routed netns fabrics: ECMP leaf-spines measured beside the model, per row.

Builds a 2-leaf netns fabric (``--hosts-per-leaf``, default 2; namespace prefix ``genie-ff-``,
removed at the end, even on failure) with 1, 2 and 4 spines at 1:1 and 2:1 oversubscription
(``--spines``, ``--over``), starts an agent in every host namespace, and runs each collective
(``--collectives``, default a ring all-reduce and a direct all-to-all; ranks alternate leaves,
h0 h<k> h1 h<k+1> ..., so every ring hop crosses the spines) at each size. The switches are
routers hashing each flow's 5-tuple over the spines (``genie.testbed.fabric_routes``); every rank
pair opens the testbed's flows (channels x qps) as TCP connections with fixed source ports.

Per row it prints the measured p50 and two model times for the same program on the same fabric
(TCP payload rates; fluid fair sharing):

* ``model ECMP``: the model's own ECMP policy (per-flow hash of its own, the same number of
  flows per rank pair): what ``genie simulate --routing ecmp`` gives, whatever paths the
  switches chose;
* ``model``: the model on the paths the switches give these very connections (read with
  ``ip route get`` for each connection's 5-tuple, both directions, once its Prepare connected
  them: ``genie.testbed.flows.kernel_paths``), each message on as many of its pair's
  connections as the agent cuts it into: what ``genie emulate`` compares with.

Iterations run back to back with no barrier between them: a rank whose part of an iteration
is done starts the next while others drain (an all-to-all over unevenly hashed spines), so each
iteration's time runs from the previous one's end. The mean of those times is the wire's rate
of iterations (the busiest link's bytes over its rate, which is what the model prices); their
p50 may split one iteration's tail with the next one's head (a 16 MiB all-to-all's p50 read
0.78-0.90x of the model while the busiest spine link's counters carried just the model's bytes
per iteration), so ``measured`` is the mean and the p50 is printed beside it.

measured / model for both; the goal for ``model``: rows >= 1 MiB within 0.90..1.10, rows at
256 KiB within 0.85..1.15. A row where an agent used more than 85 % of a core is marked
CPU-bound (then it measured Python, not the fabric). Needs root.

    sudo .venv/bin/python bench/fabric_fidelity.py                 # 6 fabrics, 4 and 16 MiB
    sudo .venv/bin/python bench/fabric_fidelity.py --quick         # 4 MiB only
    sudo .venv/bin/python bench/fabric_fidelity.py --streams 8     # 8 flows per rank pair
    # 2 leaves x 3 hosts, 3 spines at 3:1, every collective bench runs, 256 KiB to 16 MiB
    sudo .venv/bin/python bench/fabric_fidelity.py --hosts-per-leaf 3 --spines 3 --over 3 \
        --collectives all_reduce:ring,all_gather:ring,reduce_scatter:ring,all_to_all:direct \
        --sizes 256KiB,1MiB,4MiB,16MiB
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from genie.collectives.cost import estimate  # noqa: E402
from genie.controller.results import measured, stats  # noqa: E402
from genie.controller.sweep import plan_sizes  # noqa: E402
from genie.testbed import Testbed, loads_testbed  # noqa: E402
from genie.testbed.flows import kernel_paths  # noqa: E402
from genie.units import format_bytes, parse_size_sweep  # noqa: E402
from genie.wire.messages import DataOptions  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from netns_fidelity import CPU_BOUND, live  # noqa: E402

PREFIX = "genie-ff-"
RUNS = "all_reduce:ring,all_to_all:direct"


def fabric(
    spines: int, over: int, rate: str, seed: int, per_leaf: int = 2, prefix: str = PREFIX
) -> Testbed:
    """The 2-leaf routed netns fabric, ``per_leaf`` hosts a leaf, ``spines`` spines at
    ``over``:1."""
    return loads_testbed(
        f'[testbed]\nname = "ff-s{spines}-o{over}"\nkind = "netns"\nnetns_prefix = "{prefix}"\n'
        f"[routing]\nseed = {seed}\n"
        f'[topology]\nshape = "leafspine"\nleaves = 2\nspines = {spines}\n'
        f'hosts_per_leaf = {per_leaf}\noversubscription = "{over}:1"\nrate = "{rate}"\n',
        source=f"fabric {spines} spines {over}:1",
    )


def alternating(hosts: Sequence[str]) -> list[str]:
    """The hosts of two equal leaves alternating: h0 h<k> h1 h<k+1> ... (every ring hop crosses
    the spines)."""
    k = len(hosts) // 2
    return [h for pair in zip(hosts[:k], hosts[k:], strict=True) for h in pair]


def run_fabric(
    tb: Testbed,
    sizes: Sequence[int],
    iters: int,
    warmup: int,
    streams: int,
    verify: bool,
    runs: Sequence[tuple[str, str]],
) -> list[dict]:
    """Build ``tb``, run every collective at every size beside both models, tear down."""
    rows = []
    topo = tb.with_flows(streams).to_topology()
    placement = alternating([h.name for h in tb.hosts])
    ends = tb.rank_endpoints(placement)
    with live(tb, "bench/fabric_fidelity.py", tb.netns_prefix) as (ctl, meter):
        for coll, algo in runs:
            for prog in plan_sizes(coll, algo, len(placement), sizes):
                opts = DataOptions(streams=streams, verify=verify)
                ctl.prepare([prog], placement, opts)
                try:
                    paths = kernel_paths(tb, topo, ends, streams, min_part=opts.min_part)
                    seen = topo.with_paths(paths)
                    meter.lap()
                    out = ctl.run(0, iters=iters, warmup=warmup)
                    cpu = meter.lap()
                except BaseException:
                    ctl.abort("interrupted")
                    raise
                ctl.release()
                st = stats(measured(out.instances))
                row = {
                    "fabric": tb.name,
                    "collective": f"{coll}/{algo}",
                    "size": prog.spec.size,
                    "p50": st.p50,
                    "mean": st.mean,
                    "ecmp": estimate(prog, topo, placement).time_s,
                    "seen": estimate(prog, seen, placement).time_s,
                    "cpu": cpu[0],
                    "machine": cpu[2],
                }
                rows.append(row)
                _print_row(row)
    return rows


HEADER = (
    f"{'fabric':<11} {'collective':<22} {'size':>9} {'p50':>10} {'measured':>10} "
    f"{'model ECMP':>10} {'meas/ECMP':>9} {'model':>10} {'meas/model':>10} {'agent CPU':>9}"
)


def _print_row(r: dict) -> None:
    mark = "  CPU-bound" if r["cpu"] > CPU_BOUND else ""
    mark += "  machine-bound" if r["machine"] > CPU_BOUND else ""
    print(
        f"{r['fabric']:<11} {r['collective']:<22} {format_bytes(r['size']):>9} "
        f"{r['p50'] * 1e3:>8.1f}ms {r['mean'] * 1e3:>8.1f}ms "
        f"{r['ecmp'] * 1e3:>8.1f}ms {r['mean'] / r['ecmp']:>9.3f} "
        f"{r['seen'] * 1e3:>8.1f}ms {r['mean'] / r['seen']:>10.3f} {r['cpu'] * 100:>8.0f}%{mark}",
        flush=True,
    )


BANDS = ((2**20, None, 0.90, 1.10), (256 * 2**10, 2**20, 0.85, 1.15))  # min, below, lo, hi


def summary(rows: list[dict], key: str) -> list[str]:
    """Per size band (>= 1 MiB; 256 KiB up to 1 MiB): how many rows lie within its window of
    model ``key``, and the range."""
    out = []
    for lo_size, below, lo, hi in BANDS:
        band = [
            r["mean"] / r[key]
            for r in rows
            if r["size"] >= lo_size and (below is None or r["size"] < below)
        ]
        ok = [x for x in band if lo <= x <= hi]
        span = f"{min(band):.3f}..{max(band):.3f}" if band else "-"
        what = f">= {format_bytes(lo_size)}" + (f" and < {format_bytes(below)}" if below else "")
        out.append(f"sizes {what}: {len(ok)}/{len(band)} rows within {lo}..{hi} (range {span})")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run every fabric and print the table and a summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4MiB,16MiB", help="sizes (default 4MiB,16MiB)")
    ap.add_argument("--quick", action="store_true", help="4 MiB only")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rate", default="400mbit", help="host link rate (default 400mbit)")
    ap.add_argument(
        "--streams", type=int, default=None, help="flows per rank pair (default: the testbed's)"
    )
    ap.add_argument("--seed", type=int, default=1, help="routing seed (model and switches)")
    ap.add_argument("--spines", default="1,2,4", help="spine counts (default 1,2,4)")
    ap.add_argument("--over", default="1,2", help="oversubscriptions N for N:1 (default 1,2)")
    ap.add_argument("--hosts-per-leaf", type=int, default=2, help="hosts per leaf (default 2)")
    ap.add_argument(
        "--collectives",
        default=RUNS,
        help=f"COLLECTIVE:ALGORITHM,... (default {RUNS}); ranks alternate leaves",
    )
    ap.add_argument("--verify", action="store_true", help="CRC-check every message")
    ap.add_argument("--prefix", default=PREFIX, help=f"namespace prefix (default {PREFIX})")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("fabric_fidelity: needs root (network namespaces)", file=sys.stderr)
        return 2
    sizes = parse_size_sweep("4MiB" if args.quick else args.sizes)
    spines = [int(x) for x in args.spines.split(",")]
    overs = [int(x) for x in args.over.split(",")]
    runs = [tuple(x.split(":", 1)) for x in args.collectives.split(",")]
    runs = [(c[0], c[1] if len(c) > 1 else "ring") for c in runs]
    fabrics = [
        fabric(s, o, args.rate, args.seed, args.hosts_per_leaf, args.prefix)
        for o in overs
        for s in spines
    ]
    streams = args.streams or fabrics[0].routing.flows
    print(
        f"2 leaves x {args.hosts_per_leaf} hosts, host links {args.rate} (10^6 bit = 1 mbit) tbf, "
        "routed switches "
        f"hashing the 5-tuple (seed {args.seed}); {streams} TCP flow(s) per rank pair; "
        "measured = mean over the measured iterations (p50 beside it); "
        "model = genie cost model at TCP payload rates, "
        f"ECMP: {fabrics[0].with_flows(streams).routing.describe()}; model: on the paths the "
        "switches give each connection (ip route get per 5-tuple); agent CPU = busiest agent "
        "(% of one core)"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {psutil.cpu_count()} cores, load average {load} before the run")
    print(HEADER)
    rows: list[dict] = []
    for tb in fabrics:
        rows += run_fabric(tb, sizes, args.iters, args.warmup, streams, args.verify, runs)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average {load} after the run")
    for key, name in (("ecmp", "model ECMP"), ("seen", "model (the switches' paths)")):
        for line in summary(rows, key):
            print(f"measured / {name}, {line}")
    bound = [r for r in rows if r["cpu"] > CPU_BOUND]
    print(f"{len(bound)} of {len(rows)} rows CPU-bound (an agent above {CPU_BOUND:.0%} of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
