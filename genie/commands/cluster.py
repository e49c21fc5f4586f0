"""``genie cluster local``: start N agents on loopback and write a testbed file for them.

``--status`` says what each agent of the directory is doing (running, or how it died, from its
supervisor's exit record, and how to restart it); ``--restart H`` starts dead agents again on
their ports; ``--foreground`` reports an agent that dies while it watches, and goes on.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from genie.commands import _args as A

DEFAULT_DIR = "genie-cluster"


def _status(d: Path) -> int:
    """Print each agent's state; 3 if one is not running."""
    from genie.controller.local import read_pids
    from genie.controller.local_agents import restart_hint, states

    found = states(d) if read_pids(d) else []
    if not found:
        print(f"no local cluster recorded in {d}")
        return 3
    for st in found:
        line = f"{st.name}: {st.describe()}"
        if not st.running:
            line += f"; restart it: {restart_hint(d, st.name)}"
        print(line)
    return 0 if all(st.running for st in found) else 3


def _restart(d: Path, which: str) -> int:
    """Start the named (or, for 'all', every dead) agent again."""
    from genie.controller.local import restart_agents
    from genie.controller.local_agents import states

    known = states(d)
    if not known:
        print(f"no local cluster recorded in {d}")
        return 3
    want = [st.name for st in known] if which == "all" else [x for x in which.split(",") if x]
    up = {st.name for st in known if st.running}
    for name in want:
        if name in up and which != "all":
            print(f"{name}: already running")
    started = restart_agents(d, [n for n in want if n not in up])
    for p in started:
        print(f"{p.name}: restarted (pid {p.pid})")
    return 0


def _watch(d: Path, told: set[tuple[str, int]]) -> None:
    """Say once for each agent that dies how it ended and how to restart it."""
    from genie.controller.local_agents import restart_hint, states

    for st in states(d):
        if not st.running and (st.name, st.pid) not in told:
            told.add((st.name, st.pid))
            print(f"agent {st.name} {st.describe()}; restart it: {restart_hint(d, st.name)}")


def _run(args: argparse.Namespace) -> int:
    from genie.controller.local import LocalCluster, read_pids, stop_recorded
    from genie.controller.local_agents import states

    d = Path(args.dir)
    if args.status:
        return _status(d)
    if args.restart:
        return _restart(d, args.restart)
    if args.stop:
        if not read_pids(d):
            print(f"no local cluster recorded in {d}")
            return 0
        dead = [st for st in states(d) if not st.running]
        stopped = stop_recorded(d)
        print(f"stopped {len(stopped)} agents of {d} (pids {', '.join(map(str, stopped)) or '-'})")
        for st in dead:
            print(f"agent {st.name} had ended before: {st.describe()}")
        return 0
    from genie import progress
    from genie.controller.probe import probe_cluster

    with progress.stage(f"starting {args.agents} agents on 127.0.0.1"):
        cl = LocalCluster.start(
            args.agents, d, ranks_per_host=args.ranks_per_host, base_port=args.base_port
        )
    hosts = ", ".join(f"{h.name}@{h.control}" for h in cl.testbed.hosts)
    print(f"started {len(cl.procs)} agents on 127.0.0.1: {hosts}")
    if args.agents > 1 and not args.no_probe:
        try:
            with progress.stage("probing the loopback fabric (ring all-reduce, 3 sizes)"):
                probe = probe_cluster(cl)
        except BaseException:
            cl.stop()
            raise
        print(f"cost model of this testbed: {probe.describe()}")
    else:
        print(f"cost model of this testbed: {cl.testbed.model_source}")
    print(f"testbed file: {cl.testbed_path}   (logs and pids in {d}/)")
    print(f"run:   genie bench --testbed {cl.testbed_path} --collective all_reduce --algo ring")
    if not args.foreground:
        print(f"stop:  genie cluster local --stop --dir {d}")
        return 0
    print("running in the foreground; Ctrl-C stops the agents")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    seen: set[tuple[str, int]] = set()
    try:
        while not done.wait(0.5):
            _watch(d, seen)
    except KeyboardInterrupt:
        pass
    finally:
        cl.stop()
        print(f"stopped {len(cl.procs)} agents")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``cluster local``."""
    p = sub.add_parser("cluster", help="local agent clusters for trying genie on one machine")
    csub = p.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND", required=True)
    loc = csub.add_parser(
        "local",
        help="start N agents on 127.0.0.1 and write a testbed file for them",
        description="Start N genie agents on loopback (distinct ports), write DIR/testbed.toml "
        "pointing at them; stop them with --stop (by recorded pid).",
    )
    loc.add_argument(
        "--agents", type=A.integer(1, 256), default=4, help="number of agents (default 4)"
    )
    loc.add_argument(
        "--dir", default=DEFAULT_DIR, help=f"state directory (default ./{DEFAULT_DIR})"
    )
    loc.add_argument("--ranks-per-host", type=A.integer(1, 4096), default=1, help="ranks per agent")
    loc.add_argument(
        "--base-port", type=A.integer(1024, 65535), default=None, help="first control port"
    )
    loc.add_argument(
        "--no-probe",
        action="store_true",
        help="skip the few-second probe of the loopback fabric (the model then prices nominal "
        "10 Gbit/s links, not this machine)",
    )
    loc.add_argument("--foreground", action="store_true", help="stay up; Ctrl-C stops agents")
    loc.add_argument("--stop", action="store_true", help="stop the agents recorded in --dir")
    loc.add_argument(
        "--status",
        action="store_true",
        help="say what each agent of --dir is doing: running, or how it died (exit status, "
        "signal, the kernel's OOM kill) and how to restart it (exit 3 if one is not running)",
    )
    loc.add_argument(
        "--restart",
        metavar="H0,H1|all",
        default="",
        help="start these dead agents of --dir again, on their ports ('all': every dead one)",
    )
    loc.set_defaults(func=_run)
