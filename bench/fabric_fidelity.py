"""Fidelity of routed netns fabrics: ECMP leaf-spines measured beside the model, per row.

Builds a 2-leaf netns fabric (2 hosts per leaf, namespace prefix ``genie-ff-``, removed at the
end, even on failure) with 1, 2 and 4 spines at 1:1 and 2:1 oversubscription, starts an agent
in every host namespace, and runs a ring all-reduce (ranks alternating leaves, h0 h2 h1 h3, so
every ring hop crosses the spines) and a direct all-to-all at each size. The switches are
routers hashing each flow's 5-tuple over the spines (``genie.testbed.fabric_routes``); every rank
pair opens the testbed's flows (channels x qps) as TCP connections with fixed source ports.

Per row it prints the measured p50 and two model times for the same program on the same fabric
(TCP payload rates; fluid fair sharing):

* ``model ECMP``: the model's own ECMP policy (per-flow hash of its own, the same number of
  flows per rank pair): the number a user of ``genie simulate --routing ecmp`` gets;
* ``model seen``: the model given the paths the switches really gave these flows (read with
  ``ip route get`` for every established 5-tuple, ``genie.testbed.flows``): what is left when
  hash luck is taken out, i.e. the fluid model's own error.

measured / model for both; the goal is 0.85..1.15 at >= 4 MiB. A row where an agent used more
than 85 % of a core is marked CPU-bound (then it measured Python, not the fabric). Needs root.

    sudo .venv/bin/python bench/fabric_fidelity.py                 # all 6 fabrics, 4 and 16 MiB
    sudo .venv/bin/python bench/fabric_fidelity.py --quick         # 4 MiB only
    sudo .venv/bin/python bench/fabric_fidelity.py --streams 8     # 8 flows per rank pair
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
from genie.testbed.flows import observed_paths  # noqa: E402
from genie.units import format_bytes, parse_size_sweep  # noqa: E402
from genie.wire.messages import DataOptions  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from netns_fidelity import CPU_BOUND, live  # noqa: E402

PREFIX = "genie-ff-"
RUNS = [("all_reduce", "ring", ["h0", "h2", "h1", "h3"]), ("all_to_all", "direct", None)]
FABRICS = [(s, o) for o in (1, 2) for s in (1, 2, 4)]


def fabric(spines: int, over: int, rate: str, seed: int) -> Testbed:
    """The 2-leaf, 2-hosts-per-leaf routed netns fabric with ``spines`` spines at ``over``:1."""
    return loads_testbed(
        f'[testbed]\nname = "ff-s{spines}-o{over}"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
        f"[routing]\nseed = {seed}\n"
        f'[topology]\nshape = "leafspine"\nleaves = 2\nspines = {spines}\nhosts_per_leaf = 2\n'
        f'oversubscription = "{over}:1"\nrate = "{rate}"\n',
        source=f"fabric {spines} spines {over}:1",
    )


def run_fabric(
    tb: Testbed, sizes: Sequence[int], iters: int, warmup: int, streams: int, verify: bool
) -> list[dict]:
    """Build ``tb``, run every collective at every size beside both models, tear down."""
    rows = []
    topo = tb.with_flows(streams).to_topology()
    hosts = [h.name for h in tb.hosts]
    with live(tb, "bench/fabric_fidelity.py", PREFIX) as (ctl, meter):
        for coll, algo, order in RUNS:
            placement = order or hosts
            for prog in plan_sizes(coll, algo, len(placement), sizes):
                ctl.prepare([prog], placement, DataOptions(streams=streams, verify=verify))
                try:
                    seen = topo.with_observed_paths(observed_paths(tb, topo))
                    meter.lap()
                    out = ctl.run(0, iters=iters, warmup=warmup)
                    cpu = meter.lap()
                except BaseException:
                    ctl.abort("interrupted")
                    raise
                ctl.release()
                row = {
                    "fabric": tb.name,
                    "collective": f"{coll}/{algo}",
                    "size": prog.spec.size,
                    "p50": stats(measured(out.instances)).p50,
                    "ecmp": estimate(prog, topo, placement).time_s,
                    "seen": estimate(prog, seen, placement).time_s,
                    "cpu": cpu[0],
                    "machine": cpu[2],
                }
                rows.append(row)
                _print_row(row)
    return rows


HEADER = (
    f"{'fabric':<11} {'collective':<18} {'size':>9} {'measured':>10} {'model ECMP':>10} "
    f"{'meas/ECMP':>9} {'model seen':>10} {'meas/seen':>9} {'agent CPU':>9}"
)


def _print_row(r: dict) -> None:
    mark = "  CPU-bound" if r["cpu"] > CPU_BOUND else ""
    mark += "  machine-bound" if r["machine"] > CPU_BOUND else ""
    print(
        f"{r['fabric']:<11} {r['collective']:<18} {format_bytes(r['size']):>9} "
        f"{r['p50'] * 1e3:>8.1f}ms {r['ecmp'] * 1e3:>8.1f}ms {r['p50'] / r['ecmp']:>9.3f} "
        f"{r['seen'] * 1e3:>8.1f}ms {r['p50'] / r['seen']:>9.3f} {r['cpu'] * 100:>8.0f}%{mark}",
        flush=True,
    )


def summary(rows: list[dict], key: str) -> str:
    """How many rows >= 4 MiB lie within 0.85..1.15 of model ``key``, and the range."""
    big = [r["p50"] / r[key] for r in rows if r["size"] >= 4 * 2**20]
    ok = [x for x in big if 0.85 <= x <= 1.15]
    span = f"{min(big):.3f}..{max(big):.3f}" if big else "-"
    return f"{len(ok)}/{len(big)} rows within 0.85..1.15 (range {span})"


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
    ap.add_argument("--verify", action="store_true", help="CRC-check every message")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("fabric_fidelity: needs root (network namespaces)", file=sys.stderr)
        return 2
    sizes = parse_size_sweep("4MiB" if args.quick else args.sizes)
    spines = [int(x) for x in args.spines.split(",")]
    overs = [int(x) for x in args.over.split(",")]
    fabrics = [fabric(s, o, args.rate, args.seed) for o in overs for s in spines]
    streams = args.streams or fabrics[0].routing.flows
    print(
        f"2 leaves x 2 hosts, host links {args.rate} (10^6 bit = 1 mbit) tbf, routed switches "
        f"hashing the 5-tuple (seed {args.seed}); {streams} TCP flow(s) per rank pair; "
        "measured = p50 over iterations; model = genie cost model at TCP payload rates, "
        f"ECMP: {fabrics[0].with_flows(streams).routing.describe()}, seen: the paths the "
        "switches gave each flow; agent CPU = busiest agent (% of one core)"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {psutil.cpu_count()} cores, load average {load} before the run")
    print(HEADER)
    rows: list[dict] = []
    for tb in fabrics:
        rows += run_fabric(tb, sizes, args.iters, args.warmup, streams, args.verify)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average {load} after the run")
    print(f"sizes >= 4 MiB, measured / model ECMP: {summary(rows, 'ecmp')}")
    print(f"sizes >= 4 MiB, measured / model seen: {summary(rows, 'seen')}")
    bound = [r for r in rows if r["cpu"] > CPU_BOUND]
    print(f"{len(bound)} of {len(rows)} rows CPU-bound (an agent above {CPU_BOUND:.0%} of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
