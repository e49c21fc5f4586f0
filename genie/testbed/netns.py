"""Build, inspect and remove netns testbeds: the one place that runs ``ip`` and ``tc``.

``up`` applies a plan from ``netns_plan``; a failing command stops it, everything made so far
is removed, and the error names the command and its stderr. ``down`` removes one testbed.
The sweeps remove only what genie's records (or a testbed file's plan) say genie made:
``clean_testbed`` one testbed, ``clean`` the testbed of one netns prefix whose record may be
lost, ``clean_all`` every recorded testbed; a namespace no record claims is never swept by the
bare ``genie-`` prefix (another user's, or not genie's at all). Each is safe to run twice.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import psutil

from genie.errors import TestbedError
from genie.testbed import addressing, state
from genie.testbed.addressing import prefix_tag
from genie.testbed.model import Testbed
from genie.testbed.netns_plan import Command, Plan, plan_down, plan_up
from genie.wire.launch import launch_command

NS_PREFIX = "genie-"
ROOT_LINK = re.compile(r"^genie-[a-z0-9]{0,4}c\d+$")
COMMAND_TIMEOUT = 30.0


class Result(msgspec.Struct, frozen=True):
    """What a command returned."""

    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], str | None], Result]


def run_command(
    argv: Sequence[str], stdin: str | None = None, timeout: float = COMMAND_TIMEOUT
) -> Result:
    """Run ``argv`` (no shell) with a timeout and capture its output."""
    try:
        cp = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        return Result(returncode=127, stdout="", stderr=f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return Result(returncode=124, stdout="", stderr=f"timed out after {timeout:g} s")
    return Result(returncode=cp.returncode, stdout=cp.stdout, stderr=cp.stderr)


def allowed_congestion() -> frozenset[str]:
    """The congestion controls a network namespace may take as its default on this kernel."""
    try:
        text = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text()
    except OSError:
        return frozenset()
    return frozenset(text.split())


def kernel_has_hash_seed() -> bool:
    """Whether this kernel lets a namespace fix its ECMP hash seed (Linux 6.11+)."""
    return Path("/proc/sys/net/ipv4/fib_multipath_hash_seed").exists()


NETEM_PROBE = f"{NS_PREFIX}netem-probe"  # a scratch namespace, made and removed by the probe
NETEM_MODULE = Path("/sys/module/sch_netem")


def netem_available(runner: Runner = run_command) -> bool:
    """Whether this kernel has netem (sch_netem): loaded, loadable, or built in (tried on a
    scratch namespace's loopback, removed again)."""
    if NETEM_MODULE.exists():
        return True
    if shutil.which("modprobe"):
        runner(["modprobe", "-q", "sch_netem"], None)
        if NETEM_MODULE.exists():
            return True
    if runner(["ip", "netns", "add", NETEM_PROBE], None).returncode != 0:
        return False
    try:
        argv = ["tc", "-n", NETEM_PROBE, "qdisc", "add", "dev", "lo", "root", "netem"]
        return runner([*argv, "delay", "1us"], None).returncode == 0
    finally:
        runner(["ip", "netns", "del", NETEM_PROBE], None)


def tools_missing() -> list[str]:
    """Which of the tools netns testbeds need (ip, tc) are not installed."""
    return [t for t in ("ip", "tc") if shutil.which(t) is None]


def list_namespaces(runner: Runner = run_command, prefix: str = NS_PREFIX) -> list[str]:
    """Names of existing namespaces starting with ``prefix``."""
    res = runner(["ip", "-j", "netns", "list"], None)
    if res.returncode != 0:
        raise TestbedError(f"`ip -j netns list` failed: {res.stderr.strip()}")
    try:
        entries = json.loads(res.stdout or "[]")
    except json.JSONDecodeError:
        entries = [{"name": line.split()[0]} for line in res.stdout.splitlines() if line.strip()]
    return [e["name"] for e in entries if e.get("name", "").startswith(prefix)]


def list_root_links(runner: Runner = run_command, prefix: str = NS_PREFIX) -> list[str]:
    """Names of root-namespace links genie made (``genie-<tag>c<i>``) starting with ``prefix``."""
    res = runner(["ip", "-j", "link", "show"], None)
    if res.returncode != 0:
        raise TestbedError(f"`ip -j link show` failed: {res.stderr.strip()}")
    names = [e.get("ifname", "") for e in json.loads(res.stdout or "[]")]
    if prefix == NS_PREFIX:
        return [n for n in names if ROOT_LINK.match(n)]
    mine = re.compile(rf"^genie-{re.escape(prefix_tag(prefix))}c\d+$")
    return [n for n in names if mine.match(n)]


def _fail(cmd: Command, res: Result) -> TestbedError:
    err = res.stderr.strip().replace("\n", " | ") or res.stdout.strip() or "no output"
    return TestbedError(
        f"{cmd.what}: `{shlex.join(cmd.argv)}` failed (exit {res.returncode}): {err}"
    )


def _remove(namespaces: Sequence[str], root_links: Sequence[str], runner: Runner) -> list[str]:
    """Remove those of ``namespaces`` / ``root_links`` that exist; return error lines."""
    errors = []
    ns_now = set(list_namespaces(runner))
    for cmd in plan_down([n for n in namespaces if n in ns_now], []):
        res = runner(cmd.argv, cmd.stdin)
        if res.returncode != 0:
            errors.append(str(_fail(cmd, res)))
    # a root link goes with its peer's namespace; remove only those still there
    links_now = set(list_root_links(runner))
    for cmd in plan_down([], [ln for ln in root_links if ln in links_now]):
        res = runner(cmd.argv, cmd.stdin)
        if res.returncode != 0 and _root_link_exists(cmd.argv[-1], runner):
            errors.append(str(_fail(cmd, res)))
    return errors


def _root_link_exists(name: str, runner: Runner) -> bool:
    """Whether a root-namespace link called ``name`` exists."""
    return name in list_root_links(runner)


def up(
    tb: Testbed,
    source: str = "",
    runner: Runner = run_command,
    progress: Callable[[int, int, str], None] | None = None,
) -> Plan:
    """Build ``tb``; on any failure remove what was made and raise TestbedError."""
    missing = tools_missing() if runner is run_command else []
    if missing:
        raise TestbedError(f"netns testbeds need {', '.join(missing)} (Debian: iproute2)")
    real = runner is run_command
    impaired = [lk for lk in tb.links if lk.impaired]
    if impaired and not netem_available(runner):
        lk = impaired[0]
        raise TestbedError(
            f"link {lk.a}-{lk.b} has latency, jitter or loss: that needs netem (sch_netem), "
            "which this kernel lacks; genie does not fake it: remove them from the testbed file "
            "or run on a kernel with netem (Debian's has it)"
        )
    plan = plan_up(
        tb,
        hash_seed=real and kernel_has_hash_seed(),
        allowed_cc=allowed_congestion() if real else frozenset(),
    )
    existing = set(list_namespaces(runner, tb.netns_prefix)) & set(plan.namespaces)
    existing |= set(list_root_links(runner, tb.netns_prefix)) & set(plan.root_links)
    if existing:
        raise TestbedError(
            f"testbed {tb.name!r} (or one sharing its names) is already up: "
            f"{sorted(existing)[0]} exists; run `genie testbed down` or `genie testbed clean FILE`"
        )
    from genie.testbed.reach import overlaps

    clash = overlaps(tb, runner)
    if clash:
        owners = {ln: st.name for _, st in state.load_all() if st for ln in st.root_links}
        ifname = clash[0].rsplit(" on ", 1)[1]
        who = f" (testbed {owners[ifname]})" if ifname in owners else ""
        raise TestbedError(
            f"testbed {tb.name!r} would share control addresses with one already up: "
            f"{clash[0]}{who}; give one of them another netns_prefix (address slot of "
            f"{tb.netns_prefix!r}: {addressing.address_slot(tb.netns_prefix)})"
        )
    st = state.TestbedState(
        name=tb.name,
        prefix=tb.netns_prefix,
        source=source,
        namespaces=plan.namespaces,
        root_links=plan.root_links,
    )
    record = state.save(st)
    total = len(plan.commands)
    try:
        for i, cmd in enumerate(plan.commands):
            if progress:
                progress(i, total, cmd.what)
            res = runner(cmd.argv, cmd.stdin)
            if res.returncode != 0:
                err = _fail(cmd, res)
                problems = _remove(plan.namespaces, plan.root_links, runner)
                state.remove(record)
                extra = f"; rollback also failed: {problems[0]}" if problems else "; rolled back"
                raise TestbedError(f"{err}{extra}")
    except KeyboardInterrupt:  # interrupted half-way: leave nothing behind
        _remove(plan.namespaces, plan.root_links, runner)
        state.remove(record)
        raise
    if progress:
        progress(total, total, "done")
    return plan


def agent_alive(rec: state.AgentRecord) -> psutil.Process | None:
    """The live process of an agent record, or None (gone, or its pid reused)."""
    return _alive(rec)


def _alive(rec: state.AgentRecord) -> psutil.Process | None:
    try:
        p = psutil.Process(rec.pid)
        if abs(p.create_time() - rec.create_time) > 0.05:
            return None  # the pid now belongs to another process
        if p.status() == psutil.STATUS_ZOMBIE:
            return None  # exited, not yet reaped by its parent
        return p
    except psutil.Error:
        return None


def stop_agents(records: Sequence[state.AgentRecord], grace: float = 3.0) -> int:
    """Terminate the recorded agent processes still alive (by pid, start time checked)."""
    procs = [p for p in (_alive(r) for r in records) if p is not None]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return len(procs)


def down(tb: Testbed, runner: Runner = run_command) -> list[str]:
    """Remove testbed ``tb``: its agents, namespaces and root links; return what was removed."""
    plan = plan_up(tb)
    record = state.record_path(tb.name, tb.netns_prefix)
    st = state.load(record)
    removed: list[str] = []
    if st is not None:
        n = stop_agents(st.agents)
        if n:
            removed.append(f"{n} agent(s)")
    ns_now = set(list_namespaces(runner, tb.netns_prefix))
    links_now = set(list_root_links(runner, tb.netns_prefix))
    gone = [n for n in plan.namespaces if n in ns_now]
    gone += [ln for ln in plan.root_links if ln in links_now]
    errors = _remove(plan.namespaces, plan.root_links, runner)
    if errors:
        raise TestbedError(errors[0])
    state.remove(record)
    return removed + gone


TAG_PREFIX = re.compile(r"^genie-[a-z0-9]{1,4}-$")  # a testbed's own netns_prefix


def _sweep(
    records: Sequence[tuple[Path, state.TestbedState | None]],
    namespaces: Sequence[str],
    links: Sequence[str],
    runner: Runner,
) -> list[str]:
    """Stop the agents of ``records``, remove ``namespaces`` and ``links`` that exist, then the
    records; return what was removed (TestbedError after the sweep if a removal failed)."""
    removed: list[str] = []
    for _, st in records:
        if st is not None:
            n = stop_agents(st.agents)
            if n:
                removed.append(f"{n} agent(s) of {st.name}")
    ns_now = set(list_namespaces(runner))
    links_now = set(list_root_links(runner))
    gone = [n for n in dict.fromkeys(namespaces) if n in ns_now]
    gone += [ln for ln in dict.fromkeys(links) if ln in links_now]
    errors = _remove(list(dict.fromkeys(namespaces)), list(dict.fromkeys(links)), runner)
    for path, _ in records:
        state.remove(path)
    if errors:
        raise TestbedError(errors[0])
    return removed + gone


def clean_testbed(tb: Testbed, runner: Runner = run_command) -> list[str]:
    """Sweep testbed ``tb`` (``genie testbed clean FILE``): its recorded agents, and the
    namespaces and root links its record (or, if it is lost, its plan) names; nothing else."""
    record = state.record_path(tb.name, tb.netns_prefix)
    st = state.load(record)
    plan = plan_up(tb)
    namespaces = [*(st.namespaces if st else []), *plan.namespaces]
    links = [*(st.root_links if st else []), *plan.root_links]
    return _sweep([(record, st)], namespaces, links, runner)


def clean(runner: Runner = run_command, prefix: str = NS_PREFIX) -> list[str]:
    """Sweep the testbed of netns prefix ``prefix`` (``genie-TAG-``), its state lost or not: its
    records, agents, namespaces under ``prefix`` and root links of its tag. A namespace another
    testbed's record claims is left alone; the bare ``genie-`` is refused (``clean_all``)."""
    if not TAG_PREFIX.match(prefix):
        raise TestbedError(
            f"clean --prefix takes a testbed's own netns_prefix 'genie-TAG-' (TAG 1-4 of a-z "
            f"0-9), not {prefix!r}: namespaces named {prefix}* need not be genie's; give the "
            "testbed FILE, or --all-genie for every testbed genie recorded"
        )
    records = state.load_all()
    mine = [(p, st) for p, st in records if st is not None and st.prefix == prefix]
    others = {n for _, st in records if st is not None and st.prefix != prefix
              for n in (*st.namespaces, *st.root_links)}  # fmt: skip
    namespaces = [n for n in list_namespaces(runner, prefix) if n not in others]
    namespaces += [n for _, st in mine if st for n in st.namespaces]
    links = [ln for ln in list_root_links(runner, prefix) if ln not in others]
    links += [ln for _, st in mine if st for ln in st.root_links]
    return _sweep(mine, namespaces, links, runner)


def clean_all(runner: Runner = run_command) -> tuple[list[str], list[str]]:
    """Sweep every testbed genie recorded (``--all-genie``): its agents, namespaces and root
    links. Returns (removed, genie-named namespaces left because no record claims them)."""
    records = state.load_all()
    namespaces = [n for _, st in records if st is not None for n in st.namespaces]
    links = [ln for _, st in records if st is not None for ln in st.root_links]
    removed = _sweep(records, namespaces, links, runner)
    left = [n for n in list_namespaces(runner) if n not in namespaces]
    return removed, left


def netns_exec(netns: str, argv: Sequence[str]) -> list[str]:
    """argv that runs ``argv`` inside namespace ``netns``."""
    return ["ip", "netns", "exec", netns, *argv]


def data_port(h) -> int:
    """The data port of a netns host's agent: fixed (the control port's neighbour), so a flow's
    5-tuple, and with it its ECMP path, is the same on every build of the testbed."""
    return h.control_port + 1 if h.control_port < 65535 else h.control_port - 1


def agent_argv(tb: Testbed, index: int, python: str = sys.executable) -> list[str]:
    """The command that runs host ``index``'s agent inside its namespace."""
    h = tb.hosts[index]
    if h.netns is None:
        raise TestbedError(f"host {h.name!r} has no namespace")
    return netns_exec(
        h.netns,
        [*launch_command(python), "--listen", h.control, "--id", h.name,
         "--data-addr", ",".join(h.nic_addrs()), "--data-port", str(data_port(h)),
         "--testbed", tb.identity, "--missed-beats", str(tb.missed_beats)],
    )  # fmt: skip


def _listening(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=0.2):
            return True
    except OSError:
        return False


def _log_tail(path: Path, n: int = 3) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(lines[-n:]) or "empty log"


def start_agents(tb: Testbed, timeout: float = 15.0, python: str = sys.executable) -> list[str]:
    """Start one agent per host namespace, record them, and wait until each one listens."""
    record = state.record_path(tb.name, tb.netns_prefix)
    st = state.load(record)
    if st is None:
        raise TestbedError(f"testbed {tb.name!r} is not up (no record at {record})")
    if any(_alive(a) for a in st.agents):
        raise TestbedError(f"testbed {tb.name!r} already has agents running")
    logs = default_log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    st.agents = []
    for i, h in enumerate(tb.hosts):
        log = logs / f"{h.netns}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                agent_argv(tb, i, python),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # agents outlive the `genie testbed up` that made them
            )
        try:
            ctime = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            ctime = 0.0
        st.agents.append(
            state.AgentRecord(
                host=h.name,
                netns=h.netns or "",
                pid=proc.pid,
                create_time=ctime,
                listen=h.control,
                log=str(log),
            )
        )
        state.save(st)  # recorded before we wait, so `clean` finds it whatever happens
    end = time.monotonic() + timeout
    for rec, h in zip(st.agents, tb.hosts, strict=True):
        while not _listening(h.control_ip, h.control_port):
            if _alive(rec) is None or time.monotonic() > end:
                why = "exited" if _alive(rec) is None else f"not listening after {timeout:.0f} s"
                stop_agents(st.agents)
                st.agents = []
                state.save(st)
                raise TestbedError(f"agent {h.name} in {h.netns} {why}: {_log_tail(Path(rec.log))}")
            time.sleep(0.05)
    return [f"{a.host} pid {a.pid} on {a.listen}" for a in st.agents]


def default_log_dir() -> Path:
    """Where agent logs of netns testbeds go."""
    return state.state_dir() / "logs"
