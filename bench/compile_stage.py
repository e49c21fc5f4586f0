"""Benchmark: the compile stage of ``genie simulate`` alone, on a workload already loaded.

Times ``compile_workload`` (``genie.sim.batch_compile``: all ranks at once) and then
``order_collectives`` (NCCL's issue order per process group) the way ``genie.api.simulation``
calls them, best of ``--repeat`` by this process's CPU time (user + sys), the stream rules'
per-rank cache cleared before each run. ``--reference`` times the kept node-by-node references
(``compile_reference``, ``order_reference``) instead; ``--columns`` loads the workload into
columns (``genie.workload.columnar.load_columns``) and compiles from them
(``genie.sim.columns_compile``). The machine is shared: the load average is printed.

    .venv/bin/python bench/compile_stage.py /tmp/genie-w/l4096 [--repeat 3]
    .venv/bin/python bench/compile_stage.py /tmp/genie-w/l4096 --reference
    .venv/bin/python bench/compile_stage.py /tmp/genie-w/l4096 --columns

Figures (issue 33; llm, 2-core shared box, load average 1-6, CPU time): 4,096 ranks (593,920
nodes), best of 3 in each of three interleaved rounds: the code before the batch compile
(463da1b^) 1.99 s (compile 1.78 s, order 0.21 s), now 0.76 s (compile 0.69 s, order 0.07 s);
from columns, compile 0.54-0.58 s. 16,384 ranks (2,375,680 nodes), once each: 9.14 s -> 4.49 s
(compile 8.33 -> 4.05 s, order 0.81 -> 0.44 s).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main(argv: list[str] | None = None) -> int:
    """Time the compile stage on one workload and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="workload prefix or directory of .et rank files")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reference", action="store_true", help="the node-by-node references")
    ap.add_argument("--columns", action="store_true", help="load and compile as columns")
    args = ap.parse_args(argv)
    if args.reference and args.columns:
        ap.error("the references compile objects: --reference or --columns, not both")
    gc.disable()  # as genie simulate runs it (gc_paused)
    from genie.sim.adapter import compile_reference, compile_workload, load_workload
    from genie.sim.streams import order_collectives, order_reference

    t0, w0 = _cpu(), time.perf_counter()
    if args.columns:
        from genie.workload.columnar import load_columns

        wl = load_columns(args.prefix)
    else:
        wl = load_workload(args.prefix)
    print(f"loaded {wl.node_count():,} nodes, {wl.n_ranks:,} ranks: {_cpu() - t0:.2f} s CPU")
    compile_fn = compile_reference if args.reference else compile_workload
    order_fn = order_reference if args.reference else order_collectives
    runs = []
    for _ in range(args.repeat):
        for rg in getattr(wl, "ranks", []):
            if hasattr(rg, "__dict__"):
                rg.__dict__.pop("_stream_edges", None)
        t = _cpu()
        cw = compile_fn(wl)
        t1 = _cpu()
        order_fn(cw, 1)
        runs.append((_cpu() - t, t1 - t, _cpu() - t1))
        del cw
    best = min(runs)
    label = "reference" if args.reference else "columns" if args.columns else "batch"
    print(
        f"{label}: compile + order best of {args.repeat}: {best[0]:.3f} s CPU "
        f"(compile {best[1]:.3f} s, order {best[2]:.3f} s); "
        f"load average {os.getloadavg()[0]:.1f}; wall total {time.perf_counter() - w0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
