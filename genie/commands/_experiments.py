"""Command-line pieces of the experiments simulate and emulate share: stragglers, jitter, jobs.

* ``add_perturb_arguments`` / ``perturbation``: ``--straggler RANK=FACTOR``, ``--jitter
  DIST:SIGMA``, ``--seed N``, ``--perturb FILE`` (``genie.sim.perturb``);
* ``add_job_arguments`` / ``job_layout``: several workloads on one fabric, each with its hosts
  (``--job-hosts``) and start (``--job-start``) (``genie.sim.jobs``);
* ``replay_perturbed``: a replay with stragglers beside the same workload without them, and who
  waited on whom (``genie.sim.waits``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genie.commands import _args as A
from genie.errors import UsageError
from genie.sim import perturb
from genie.sim.jobs import packed_hosts, parse_hosts, place_job


def add_perturb_arguments(p: argparse.ArgumentParser) -> None:
    """``--straggler``, ``--jitter``, ``--seed``, ``--perturb``."""
    g = p.add_argument_group("stragglers and jitter (genie.sim.perturb)")
    g.add_argument(
        "--straggler",
        action="append",
        metavar="RANK=FACTOR",
        help="rank(s) whose compute takes FACTOR times longer: 3=1.5, 8-11=1.2 (repeatable)",
    )
    g.add_argument(
        "--jitter",
        metavar="DIST:SIGMA",
        help="random factor of mean 1 on every compute node: normal:0.05, lognormal:5%%, "
        "uniform:0.1",
    )
    g.add_argument("--seed", type=A.integer(0, 2**62), help="seed of the jitter (default 0)")
    g.add_argument(
        "--perturb", metavar="FILE", help="TOML file: seed, jitter, [slowdown] rank = factor"
    )


def perturbation(args: argparse.Namespace) -> perturb.Perturbation:
    """The perturbation the command line asks for (empty when none)."""
    return perturb.combine(
        getattr(args, "perturb", None),
        getattr(args, "straggler", None),
        getattr(args, "jitter", None),
        getattr(args, "seed", None),
    )


def add_job_arguments(p: argparse.ArgumentParser, ranks_per_host: bool = False) -> None:
    """``--job-hosts``, ``--job-start``, ``--job-name`` (one per workload, in order); with
    ``ranks_per_host``, also ``--ranks-per-host`` (for a command that has none of its own)."""
    g = p.add_argument_group(
        "several jobs on one fabric: give several workloads, then per job (in order)"
    )
    g.add_argument(
        "--job-hosts",
        action="append",
        metavar="HOSTS",
        help="host indices of the next job: 0-3 or 0,2,4,6 (default: the next free hosts, "
        "--ranks-per-host to a host); jobs may share hosts",
    )
    g.add_argument(
        "--job-start",
        action="append",
        type=A.duration,
        metavar="DURATION",
        help="start offset of the next job, e.g. 2ms (default 0)",
    )
    g.add_argument("--job-name", action="append", metavar="NAME", help="name of the next job")
    if ranks_per_host:
        g.add_argument(
            "--ranks-per-host",
            type=A.integer(1, 4096),
            default=1,
            help="ranks per host of a job placed without --job-hosts (default 1)",
        )


def wants_jobs(args: argparse.Namespace) -> bool:
    """True when the command line describes several jobs (or one job placed by hand)."""
    return len(args.workload) > 1 or bool(args.job_hosts or args.job_start or args.job_name)


def job_names(prefixes: Sequence[str], given: Sequence[str] | None) -> list[str]:
    """One name per job: the given ones, else the workload's file name (made unique)."""
    given = list(given or [])
    if len(given) > len(prefixes):
        raise UsageError(f"{len(given)} --job-name for {len(prefixes)} workloads")
    if len(set(given)) != len(given):
        raise UsageError(f"job names must differ: {given}")
    out: list[str] = []
    for i, pre in enumerate(prefixes):
        name = given[i] if i < len(given) else Path(pre.rstrip("/")).name or f"job{i}"
        if "/" in name or not name:
            raise UsageError(f"job name {name!r}: no '/' and not empty")
        base, k = name, 2
        while name in out:
            name, k = f"{base}#{k}", k + 1
        out.append(name)
    return out


def job_layout(
    args: argparse.Namespace, sizes: Sequence[int]
) -> tuple[list[tuple[int, ...]], list[float]]:
    """Per job, the host of each rank and its start offset (see ``add_job_arguments``)."""
    n = len(sizes)
    hosts_given = list(args.job_hosts or [])
    starts = list(args.job_start or [])
    if len(hosts_given) > n or len(starts) > n:
        raise UsageError(
            f"{len(hosts_given)} --job-hosts and {len(starts)} --job-start for {n} workloads"
        )
    k = args.ranks_per_host
    default = packed_hosts(sizes, k)
    taken = {h for t in hosts_given for h in parse_hosts(t)}
    nxt = max(taken, default=-1) + 1
    layout = []
    for i, size in enumerate(sizes):
        if i < len(hosts_given):
            layout.append(place_job(size, parse_hosts(hosts_given[i])))
            continue
        block = tuple(range(nxt, nxt + len(default[i])))
        nxt += len(default[i])
        layout.append(place_job(size, block, k))
    return layout, [float(x) for x in starts] + [0.0] * (n - len(starts))


def replay_perturbed(
    cw: Any,
    base: Any,
    backend: Any,
    make_backend: Callable[[], Any],
    pert: perturb.Perturbation,
    symmetry: bool,
) -> tuple[Any, Any]:
    """Replay ``cw`` (perturbed) over ``backend``; with a perturbation, also ``base`` (the same
    workload unperturbed) over a fresh ``make_backend()``, and put the straggler analysis on the
    report. Returns (report, raw result)."""
    from genie.sim.api import replay
    from genie.sim.attribution import busiest_links
    from genie.sim.waits import straggler_cost, who_waited

    rep, raw = replay(cw, backend, symmetry=symmetry)
    rep.links = busiest_links(backend, rep.iteration_s)
    if pert:
        base_rep, _ = replay(base, make_backend(), symmetry=symmetry)
        rep.stragglers = {
            "perturbation": pert.to_dict(),
            "described": pert.describe(),
            **straggler_cost(rep.iteration_s, base_rep.iteration_s),
            **who_waited(cw, raw),
        }
    return rep, raw
