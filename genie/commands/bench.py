"""``genie bench``: sweep a collective over sizes on a live testbed, nccl-tests style.

Prints, per size, nccl-tests' columns (size, count, type, time, algbw, busbw) with time as the
p50 over measured iterations, then p99, min, max, the cost model's time and measured/modeled;
then the model's error per size, nominal and calibrated (``--calibration``). Bandwidths are
GB/s = 10^9 bytes/s. Every instance goes to the run store (as measured, undilated); the sweep
itself is ``genie.api.bench``.

``--dilation K`` reports every time divided by K (bandwidths times K): the lab's links standing
for links K times faster; the report says what does not scale (``genie.calibration.dilation``).

``--nccl-channels C`` / ``--nccl-proto P`` run the ring NCCL-style
(``genie.collectives.nccl_wire``): C channels, each its own connection per peer, chunks of the
protocol's size, its flag bytes on the wire; the model prices the same program; the title says so.

``--faults SCHEDULE`` changes links while the sweep runs (``genie.faults``), timed from
``FAULT_ORIGIN``. The report gives, per size, the p50 of the iterations that overlapped a fault
beside those that overlapped none; the stored run's meta keeps it all.
"""

from __future__ import annotations

import argparse
import json
import sys

from genie.api.benchmark import FAULT_ORIGIN, BenchSpec, bench
from genie.collectives.nccl_wire import MAX_CHANNELS, PROTOCOLS
from genie.commands import _args as A
from genie.commands import _tcp_cc as cc
from genie.commands._bench_output import (
    print_fault_effect,
    print_model_error,
    print_repeats,
    print_table,
)
from genie.commands._calibration import add_argument as add_calibration_argument
from genie.commands._calibration import add_dilation_argument
from genie.commands._faults import add_argument as add_faults_argument
from genie.placement import MODES as PLACEMENTS
from genie.store import DEFAULT_STORE

DEFAULT_REPEATS = 3  # each size run three times over unless --repeats or --faults says otherwise


def spec_from_args(args: argparse.Namespace) -> BenchSpec:
    """The ``BenchSpec`` of ``genie bench``'s command line."""
    return BenchSpec(
        testbed=args.testbed,
        collective=args.collective,
        algorithm=args.algo,
        sizes=tuple(args.sizes),
        iters=args.iters,
        warmup=args.warmup,
        ranks=args.ranks,
        placement=args.placement,
        chunks=args.chunks,
        streams=args.streams,
        sndbuf=args.sndbuf,
        rcvbuf=args.rcvbuf,
        verify=not args.no_verify,
        transport=args.transport,
        slow_rate=args.slow_rate,
        timeout_margin=args.timeout_margin,
        calibration=args.calibration,
        dilation=args.dilation,
        faults=args.faults,
        repeats=args.repeats or (1 if args.faults else DEFAULT_REPEATS),
        nccl_channels=args.nccl_channels or 0,
        nccl_proto=args.nccl_proto,
        nccl_buffsize=args.nccl_buffsize,
        store=None if args.no_store else args.store,
        command="genie " + " ".join(sys.argv[1:]),
        progress=True,  # genie.progress draws it only on a terminal, never with -q
    )


def _run(args: argparse.Namespace) -> int:
    """Handle ``genie bench``: parse -> spec -> ``genie.api.bench`` -> render."""
    spec = spec_from_args(args)
    ccs = cc.algorithms(args.tcp_cc)
    if len(ccs) > 1:  # congestion control as an experiment: one run each, side by side
        results = {a: bench(spec.replace(congestion=a)) for a in ccs}
        if args.json:
            docs = {a: r.to_dict() for a, r in results.items()}
            json.dump({"tcp_cc": docs}, sys.stdout, indent=2)
            print()
        else:
            cc.print_bench(results)
        return 0
    res = bench(spec.replace(congestion=ccs[0]) if ccs else spec)
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    title = f"genie bench: {res.collective}/{res.algorithm} on {args.testbed}"
    if res.style:
        title += f" ({res.style})"
    if res.dilation != 1:
        title += f", dilated x{res.dilation:g} (times / {res.dilation:g})"
    print_table(res.rows, title, spec.iters, spec.warmup, model=res.model)
    print_model_error(res, spec.calibration)
    print_repeats(res.rows)
    if res.faults is not None:
        print_fault_effect(res.faults)
    if res.run_id:
        print(f"stored as run {res.run_id} in {spec.store}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command."""
    p = sub.add_parser(
        "bench",
        help="measure a collective over sizes on a live testbed (nccl-tests style)",
        description="Run a collective on the testbed's agents for each size and print "
        "nccl-tests columns plus the cost model's time. GB/s = 10^9 bytes/s.",
    )
    p.add_argument("--testbed", required=True, metavar="FILE", help="testbed TOML file")
    p.add_argument("--collective", default="all_reduce", help="collective (default all_reduce)")
    p.add_argument("--algo", default=None, help="algorithm (default: the collective's default)")
    p.add_argument(
        "--sizes",
        type=A.sweep,
        default="1KiB:16MiB:x4",
        help="MIN:MAX:xF, MIN:MAX:+S or A,B,C (bytes; at most 10000 sizes)",
    )
    p.add_argument(
        "--iters", type=A.integer(1, 10**6), default=20, help="measured iterations per size"
    )
    p.add_argument(
        "--warmup", type=A.integer(0, 10**5), default=5, help="warm-up iterations per size"
    )
    p.add_argument(
        "--ranks", type=A.integer(1, 1 << 16), default=None, help="ranks (default: the testbed's)"
    )
    p.add_argument(
        "--placement",
        default="testbed",
        choices=PLACEMENTS,
        help="ranks to agents: testbed (its rank slots), packed (one per agent, more where "
        "needed) or round-robin",
    )
    p.add_argument(
        "--chunks", type=A.integer(1, 1024), default=1, help="pipeline chunks per collective"
    )
    A.add_streams(p)
    p.add_argument(
        "--sndbuf", type=A.size(0, 1 << 30), default="0", help="SO_SNDBUF (0 = kernel autotuning)"
    )
    p.add_argument(
        "--rcvbuf", type=A.size(0, 1 << 30), default="0", help="SO_RCVBUF (0 = kernel autotuning)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip per-message CRC checks")
    p.add_argument(
        "--transport",
        choices=["tcp", "rdma"],
        default=None,
        help="data plane (default: the testbed file's transport, tcp if unset)",
    )
    p.add_argument(
        "--slow-rate",
        type=A.bandwidth,
        default="160mbit",
        help="slowest rate assumed when bounding waits",
    )
    p.add_argument(
        "--timeout-margin", type=A.real(0, 1000), default=4.0, help="margin on that bound"
    )
    add_dilation_argument(p, "every time reported / K and bandwidths x K")
    add_calibration_argument(p, "none")
    add_faults_argument(p, FAULT_ORIGIN)
    cc.add_argument(p)
    p.add_argument(
        "--repeats",
        type=A.integer(1, 100),
        default=None,
        help=f"run each size this many times over (its own prepare, warm-up and iterations) and "
        f"say how far the repeats' p50s lie apart (default {DEFAULT_REPEATS}; 1 with --faults, "
        "whose schedule is one pass in time)",
    )
    p.add_argument(
        "--nccl-channels",
        type=A.integer(1, MAX_CHANNELS),
        default=None,
        metavar="C",
        help="run the ring NCCL-style on C channels, each its own connection per peer "
        "(with --nccl-proto; default 1 when only that is given)",
    )
    p.add_argument(
        "--nccl-proto",
        choices=PROTOCOLS,
        default=None,
        help="run the ring NCCL-style with this protocol's chunks and flag bytes on the wire "
        "(default simple when only --nccl-channels is given)",
    )
    p.add_argument(
        "--nccl-buffsize",
        type=A.size(0, 1 << 30),
        default="0",
        metavar="BYTES",
        help="NCCL-style: the protocol's buffer (NCCL_BUFFSIZE and kin; 0 = NCCL's default)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument("--no-store", action="store_true", help="do not record the run")
    p.set_defaults(func=_run)
