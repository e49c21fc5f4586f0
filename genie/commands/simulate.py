"""``genie simulate``: replay a workload over one or more network backends and report.

Networks: ``analytical`` (fluid link sharing on the testbed's topology or a target topology)
and ``measured:RUN`` (per-collective times of a ``genie bench`` run, or a JSON file of rows),
side by side when several are given. Bandwidths print in GB/s = 10^9 B/s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from genie.errors import GenieError, UsageError
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload
from genie.sim.measured import MeasuredBackend, MeasuredTable
from genie.sim.netmodel import TOPOLOGIES, NetModel, closed_form, parse_bandwidth
from genie.sim.network import AnalyticalBackend
from genie.sim.report import SimReport, chrome_trace
from genie.units import format_bytes, format_seconds, parse_duration

EXTRA_TOPOLOGIES = ("ring", "leaf_spine")
_FORMULA = {
    "all_reduce": "2(n-1)(alpha + S/(nB)) = ",
    "reduce_scatter": "(n-1)(alpha + S/(nB)) = ",
    "all_gather": "(n-1)(alpha + S/B) = ",
    "all_to_all": "alpha + (n-1)S/(nB) = ",
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie simulate``."""
    p = sub.add_parser(
        "simulate",
        help="replay a Chakra workload over analytical / measured network backends",
        description=__doc__,
    )
    p.add_argument("workload", help="workload prefix (files PREFIX.<rank>.et) or its directory")
    p.add_argument("--testbed", help="testbed TOML: topology and rank placement")
    p.add_argument(
        "--topology",
        choices=[*TOPOLOGIES, *EXTRA_TOPOLOGIES],
        help="target topology when no testbed is given (default switch)",
    )
    p.add_argument(
        "--bandwidth",
        default="50GiB/s",
        help="link bandwidth: 50GiB/s (2^30 B/s, ASTRA-sim's 'GB/s'), 50GB/s (10^9 B/s), "
        "100Gb/s or 400gbit (bits)",
    )
    p.add_argument(
        "--latency",
        default="500ns",
        help="latency per link (ASTRA-sim: hops x latency; a switch route has 2 hops)",
    )
    p.add_argument("--ranks-per-host", type=int, default=1, help="ranks placed on each host")
    p.add_argument("--intra-bandwidth", help="bandwidth between ranks of one host")
    p.add_argument("--intra-latency", default="0", help="latency between ranks of one host")
    p.add_argument("--leaves", type=int, default=2, help="leaf_spine: leaf switches")
    p.add_argument("--spines", type=int, default=1, help="leaf_spine: spine switches")
    p.add_argument("--oversubscription", type=float, default=1.0, help="leaf_spine uplinks")
    p.add_argument(
        "--network",
        default="analytical",
        help="comma list of backends: analytical, measured:RUN_ID or measured:FILE.json",
    )
    p.add_argument("--store", help="run store file (default: genie's)")
    p.add_argument(
        "--pricer",
        choices=("programs", "builtin"),
        default="programs",
        help="analytical pricing: programs = step programs priced by genie.collectives.cost "
        "(default); builtin = the simulator's own traffic model (faster)",
    )
    p.add_argument(
        "--algorithm",
        help="algorithm for every collective offering it (ring, halvingDoubling, ...) or per "
        "collective: all_reduce=ring,all_to_all=direct",
    )
    p.add_argument("--chunks", type=int, default=1, help="chunks per collective (pipelining)")
    p.add_argument("--compute", choices=("trace", "roofline"), default="trace")
    p.add_argument("--peak-flops", type=float, help="roofline: peak FLOP/s (e.g. 989e12)")
    p.add_argument("--efficiency", type=float, default=1.0, help="roofline: fraction of peak")
    p.add_argument("--memory-bandwidth", help="roofline: memory bandwidth, e.g. 3.35TB/s")
    p.add_argument(
        "--no-symmetry",
        action="store_true",
        help="replay every rank even when ranks are provably identical",
    )
    p.add_argument(
        "--no-sharing",
        action="store_true",
        help="measured: instances in flight together do not slow each other (default: they "
        "share links as the analytical model says, scaled to their measured times)",
    )
    p.add_argument("--trace", help="write a Chrome-trace/Perfetto JSON timeline here")
    p.add_argument(
        "--trace-ranks", type=int, default=256, help="ranks written to the trace (first N)"
    )
    p.add_argument("--rows", type=int, default=20, help="collective rows shown per backend")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.set_defaults(func=run)
    from genie.sim.emulate_cmd import register_emulate

    register_emulate(sub)  # `genie emulate` lives with the simulator (genie/sim/emulate_cmd.py)


def _algorithms(text: str | None) -> dict[str, str]:
    """``ring`` (every collective that offers it) or ``all_reduce=ring,all_to_all=direct``."""
    if not text:
        return {}
    from genie.collectives import ALGORITHMS, canonical_algorithm, canonical_collective

    out: dict[str, str] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if "=" in part:
            coll, algo = (x.strip() for x in part.split("=", 1))
            coll = canonical_collective(coll)
            out[coll] = canonical_algorithm(coll, algo)
        else:
            hits = 0
            for coll in ALGORITHMS:
                try:
                    out[coll] = canonical_algorithm(coll, part)
                    hits += 1
                except GenieError:
                    continue
            if not hits:
                raise UsageError(f"no collective offers algorithm {part!r}")
    return out


def _network_model(args: argparse.Namespace, n_ranks: int) -> tuple[Any, dict]:
    """The analytical pricer and what the closed form needs (or {} if not comparable)."""
    intra_bw = parse_bandwidth(args.intra_bandwidth) if args.intra_bandwidth else None
    intra_lat = parse_duration(args.intra_latency)
    k = args.ranks_per_host
    if k < 1:
        raise UsageError("--ranks-per-host must be at least 1")
    if args.chunks < 1:
        raise UsageError("--chunks must be at least 1")
    from genie.collectives import topology as ctopo

    extra = {"intra_bandwidth": intra_bw, "intra_latency": intra_lat}
    if args.testbed:
        if args.topology:
            raise UsageError("give either --testbed or --topology, not both")
        from genie.testbed import load_testbed

        tb = load_testbed(args.testbed)
        topo = tb.to_topology()
        placement = tb.rank_hosts()
        if k > 1 or len(placement) < n_ranks:
            k = max(k, math.ceil(n_ranks / max(1, len(tb.hosts))))
            placement = [min(r // k, len(tb.hosts) - 1) for r in range(n_ranks)]
            args.placement_note = (
                f"placement: {n_ranks} ranks, {k} per host on the testbed's {len(tb.hosts)} "
                "hosts (its rank slots do not cover the workload, or --ranks-per-host was given)"
            )
        placement = placement[:n_ranks]
    else:
        kind = args.topology or "switch"
        bw, lat = parse_bandwidth(args.bandwidth), parse_duration(args.latency)
        n_hosts = math.ceil(n_ranks / k)
        placement = [r // k for r in range(n_ranks)]
        if args.pricer == "builtin" and kind in TOPOLOGIES:
            model = NetModel(n_ranks, bw, lat, kind, k, intra_bw, intra_lat)
            closed = {"bandwidth": bw, "latency": model.alpha} if k == 1 else {}
            return model, closed if kind == "switch" else {}
        if kind == "switch":
            topo = ctopo.switch(n_hosts, bw, lat, **extra)
        elif kind == "fully_connected":
            topo = ctopo.fully_connected(max(2, n_hosts), bw, lat, **extra)
        elif kind == "ring":
            topo = ctopo.ring(max(2, n_hosts), bw, lat, **extra)
        else:
            per_leaf = math.ceil(n_hosts / args.leaves)
            topo = ctopo.leaf_spine(
                args.leaves, args.spines, per_leaf, bw, lat, args.oversubscription, **extra
            )
    if args.pricer == "builtin":
        from genie.sim.topo_pricer import TopologyPricer

        pricer: Any = TopologyPricer(topo, placement, n_ranks)
    else:
        from genie.sim.program_pricer import ProgramPricer

        algos = _algorithms(args.algorithm)
        pricer = ProgramPricer(topo, placement, n_ranks, algos, args.chunks)
    closed = {}
    one_per_host = len(set(placement)) == n_ranks
    if getattr(topo, "kind", "") == "star" and one_per_host and len(topo.hosts) > 1:
        route = topo.route(0, 1)
        closed = {
            "bandwidth": topo.route_bandwidth(route),
            "latency": topo.route_latency(route),
            "algorithms": getattr(pricer, "algorithms", {}),
            "chunks": args.chunks,
        }
    return pricer, closed


def _describe(pricer: Any) -> str:
    return pricer.describe() if hasattr(pricer, "describe") else type(pricer).__name__


def _backends(args: argparse.Namespace, pricer: Any) -> list:
    out = []
    for spec in [s.strip() for s in args.network.split(",") if s.strip()]:
        if spec == "analytical":
            out.append(AnalyticalBackend(pricer))
        elif spec.startswith("measured:"):
            table = MeasuredTable.from_store(
                spec.split(":", 1)[1], args.store, _algorithms(args.algorithm)
            )
            alone = AnalyticalBackend(pricer)
            share = None if args.no_sharing else pricer
            out.append(MeasuredBackend(table, model=alone.alone, name=spec, pricer=share))
        elif spec in ("testbed", "emulate"):
            raise UsageError(
                "the testbed backend runs through `genie emulate WORKLOAD --testbed F`"
            )
        else:
            raise UsageError(f"unknown network backend {spec!r} (analytical, measured:RUN_ID)")
    if not out:
        raise UsageError("--network names no backend")
    return out


def run(args: argparse.Namespace) -> int:
    """Handle ``genie simulate``."""
    err = Console(stderr=True)
    compute = ComputeModel(
        mode=args.compute,
        peak_flops=args.peak_flops,
        efficiency=args.efficiency,
        memory_bandwidth=parse_bandwidth(args.memory_bandwidth) if args.memory_bandwidth else None,
    )
    if args.compute == "roofline" and not (args.peak_flops or args.memory_bandwidth):
        raise UsageError("--compute roofline needs --peak-flops and/or --memory-bandwidth")
    with err.status("loading workload", spinner="dots") as status:
        wl = load_workload(args.workload)
        status.update(f"compiling {wl.n_ranks} ranks")
        cw = compile_workload(wl, compute)
        pricer, closed = _network_model(args, cw.n_ranks)
        backends = _backends(args, pricer)
        reports: list[SimReport] = []
        raws = []
        for be in backends:
            status.update(f"replaying {cw.n_nodes} nodes over {be.name}")
            rep, raw = replay(cw, be, symmetry=not args.no_symmetry)
            if isinstance(be, MeasuredBackend):
                rep.notes.append(be.summary())
            if getattr(args, "placement_note", None):
                rep.notes.append(args.placement_note)
            fallbacks = getattr(pricer, "fallbacks", None)
            if fallbacks:
                rep.notes.append(
                    "priced by the built-in traffic model (no program or the cost model "
                    f"declined): {dict(sorted(fallbacks.items()))}"
                )
            reports.append(rep)
            raws.append(raw)
    if args.trace:
        n = chrome_trace(cw, raws[0], args.trace, max_ranks=args.trace_ranks)
        left = cw.n_ranks - min(cw.n_ranks, args.trace_ranks)
        more = f"; {left} ranks left out (--trace-ranks)" if left > 0 else ""
        err.print(f"trace: {n} events ({reports[0].backend}) written to {args.trace}{more}")
    network = _describe(pricer)
    if args.json:
        doc = {
            "workload": cw.name,
            "network": network,
            "reports": [_with_closed(r.to_dict(), closed) for r in reports],
        }
        json.dump(_finite(doc), sys.stdout, indent=1, allow_nan=False, default=_nan_safe)
        sys.stdout.write("\n")
        return 0
    _print(
        Console(width=None if sys.stdout.isatty() else 120), cw, network, reports, closed, args.rows
    )
    return 0


def _nan_safe(o: Any) -> Any:
    return str(o)


def _finite(o: Any) -> Any:
    """Replace NaN and infinities (not JSON) by None, recursively."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_finite(v) for v in o]
    return o


def _with_closed(d: dict, closed: dict) -> dict:
    for row in d["collectives"]:
        row["closed_form_s"] = _closed_for(row, closed)
    return d


def _closed_for(row: dict, closed: dict) -> float | None:
    """The collectives module's closed form for a row (ours when it has none), or None."""
    if not closed or row["collective"] == "send_recv":
        return None
    coll, n, size = row["collective"], row["ranks"], row["size"]
    if closed.get("chunks", 1) == 1:
        try:
            from genie.collectives.cost import closed_form as cf
            from genie.collectives.registry import DEFAULT_ALGORITHM

            name = "reduce_scatter" if coll == "reduce_scatter_block" else coll
            algo = closed.get("algorithms", {}).get(name) or DEFAULT_ALGORITHM[name]
            return cf(name, algo, n, size, closed["bandwidth"], closed["latency"])
        except (ImportError, KeyError, GenieError):
            pass
    if closed.get("algorithms"):
        return None
    return closed_form(coll, n, size, closed["bandwidth"], closed["latency"])


def _print_ranks(con: Console, rep: SimReport, limit: int = 16) -> None:
    """Per-rank breakdown: every rank when few, else the extremes of waiting and comm."""
    ranks = rep.ranks
    if len(ranks) > limit:
        by_wait = sorted(ranks, key=lambda b: (b.wait, b.rank))
        by_comm = sorted(ranks, key=lambda b: (b.exposed_comm, b.rank))
        pick = {b.rank: b for b in (by_wait[0], by_wait[-1], by_comm[0], by_comm[-1])}
        ranks = [pick[k] for k in sorted(pick)]
        title = f"ranks over {rep.backend}: least/most waiting and exposed comm of {rep.n_ranks}"
    else:
        title = f"ranks over {rep.backend}"
    if rep.symmetric:
        title += " (all ranks identical)"
        ranks = ranks[:1]
    t = Table(title=title, title_justify="left")
    for c in ("rank", "compute", "exposed comm", "wait", "idle", "finish"):
        t.add_column(c, justify="right")
    for b in ranks:
        t.add_row(
            str(b.rank),
            format_seconds(b.compute),
            format_seconds(b.exposed_comm),
            format_seconds(b.wait),
            format_seconds(b.idle),
            format_seconds(b.finish),
        )
    con.print(t)


def _print(
    con: Console,
    cw: CompiledWorkload,
    network: str,
    reports: list[SimReport],
    closed: dict,
    rows: int,
) -> None:
    con.print(
        f"[bold]workload[/] {cw.name}: {cw.n_ranks} ranks, {cw.n_nodes} nodes, "
        f"{len(cw.instances)} communication instances"
    )
    con.print(f"[bold]network[/]  {network}")
    summary = Table(title="iteration (per-rank means)", title_justify="left")
    for col in ("backend", "iteration", "compute", "exposed comm", "wait", "idle", "replay"):
        summary.add_column(col, justify="right" if col != "backend" else "left")
    for r in reports:
        summary.add_row(
            r.backend,
            format_seconds(r.iteration_s),
            format_seconds(r.mean("compute")),
            format_seconds(r.mean("exposed_comm")),
            format_seconds(r.mean("wait")),
            format_seconds(r.mean("idle")),
            format_seconds(r.wall_s) + (" (sym)" if r.symmetric else ""),
        )
    con.print(summary)
    for r in reports:
        _print_ranks(con, r)
    for r in reports:
        t = Table(
            title=f"collectives over {r.backend} (algbw/busbw in GB/s = 10^9 B/s)",
            title_justify="left",
        )
        cols = ["#", "collective", "group", "n", "size", "start", "end", "arrival skew", "time"]
        cols += ["algbw", "busbw"]
        if closed:
            cols += ["closed form", "ratio"]
        for c in cols:
            t.add_column(c, justify="left" if c in ("collective", "group") else "right")
        for row in r.collectives[:rows]:
            cells = [
                str(row.seq),
                row.collective,
                row.group,
                str(row.ranks),
                format_bytes(row.size),
                format_seconds(row.start),
                format_seconds(row.end),
                format_seconds(row.start - row.first_arrival),
                format_seconds(row.time),
                f"{row.algbw_gbps:.2f}",
                f"{row.busbw_gbps:.2f}",
            ]
            if closed:
                cf = _closed_for({**row.__dict__}, closed)
                cells += [
                    format_seconds(cf) if cf is not None else "-",
                    f"{row.time / cf:.4f}" if cf else "-",
                ]
            t.add_row(*cells)
        con.print(t)
        if len(r.collectives) > rows:
            con.print(f"... {len(r.collectives) - rows} more instances (--rows, --json)")
        if closed and len(r.collectives) == 1 and r.collectives[0].collective != "send_recv":
            row = r.collectives[0]
            cf = _closed_for({**row.__dict__}, closed)
            if cf:
                con.print(
                    f"{row.collective} of {row.size} B on {row.ranks} ranks: {r.backend} "
                    f"{row.time * 1e6:.4f} us, closed form {_FORMULA.get(row.collective, '')}"
                    f"{cf * 1e6:.4f} us (alpha {closed['latency'] * 1e9:.0f} ns per message, B "
                    f"{closed['bandwidth'] / 2**30:.3f} GiB/s), ratio {row.time / cf:.6f}"
                )
        for note in r.notes:
            con.print(f"note ({r.backend}): {note}")
