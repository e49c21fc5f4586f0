"""Command-line pieces of the experiments simulate and emulate share: stragglers, jitter, jobs.

* ``add_perturb_arguments`` / ``perturb_spec``: ``--straggler RANK=FACTOR``, ``--jitter
  DIST:SIGMA``, ``--seed N``, ``--perturb FILE`` as a ``genie.api.Perturb``;
* ``add_job_arguments`` / ``jobs_spec``: several workloads on one fabric, each with its hosts
  (``--job-hosts``), start (``--job-start``) and name, as ``genie.api.Job`` specs.
"""

from __future__ import annotations

import argparse

from genie.api.specs import Job, Perturb
from genie.commands import _args as A
from genie.errors import UsageError


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


def perturb_spec(args: argparse.Namespace) -> Perturb:
    """The ``Perturb`` spec of the command line (empty when none)."""
    return Perturb(
        stragglers=tuple(getattr(args, "straggler", None) or ()),
        jitter=getattr(args, "jitter", None),
        seed=getattr(args, "seed", None),
        file=getattr(args, "perturb", None),
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


def jobs_spec(args: argparse.Namespace) -> tuple[Job, ...]:
    """The ``Job`` of every workload when the command line describes jobs, else ()."""
    if not wants_jobs(args):
        return ()
    n = len(args.workload)
    hosts, starts = list(args.job_hosts or []), list(args.job_start or [])
    names = list(args.job_name or [])
    if len(names) > n:
        raise UsageError(f"{len(names)} --job-name for {n} workloads")
    if len(hosts) > n or len(starts) > n:
        raise UsageError(
            f"{len(hosts)} --job-hosts and {len(starts)} --job-start for {n} workloads"
        )
    return tuple(
        Job(
            workload=w,
            hosts=hosts[i] if i < len(hosts) else None,
            start=starts[i] if i < len(starts) else 0.0,
            name=names[i] if i < len(names) else None,
        )
        for i, w in enumerate(args.workload)
    )
