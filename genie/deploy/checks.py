"""``genie hosts check``: is each testbed host ready for genie? Each failed check says its fix.

``evaluate`` is pure: it turns a host's probe facts (see ``remote_probe``) and a measured clock
offset into checks, so the rules are tested without SSH. ``check_hosts`` gathers the facts over
SSH, in parallel, and an unreachable host is one failed check, not an error. Two more checks
per reachable host: ``keys`` (the host's ``ROOT/keys`` matches ``[deploy] keys``: modes, public
keys, no controller secret) and ``agent`` (it says hello to this controller, over CURVE with
the controller's keys when set).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from genie import __version__
from genie.deploy.check import Check
from genie.deploy.config import DeployConfig, HostAccess
from genie.deploy.deployer import MIN_PYTHON
from genie.deploy.hello import say_hello
from genie.deploy.keyfiles import key_plan_or_error, key_problem
from genie.deploy.rdma_checks import wants_rdma
from genie.deploy.rdma_preflight import preflight_remote
from genie.deploy.ssh import Remote, probe
from genie.deploy.tcp_checks import tcp_checks
from genie.errors import DeployError, SshError
from genie.testbed import Host, Testbed

CLOCK_WARN_S = 0.005  # the controller syncs clocks itself; beyond this, timelines look skewed
CLOCK_SAMPLES = 16
AGENT_HELLO_S = 3.0  # how long hosts check waits for a deployed agent's hello


@dataclass
class ClockOffset:
    """Host clock minus local clock, from the lowest-RTT sample (seconds)."""

    offset_s: float
    rtt_s: float


def _ssh_hint(a: HostAccess) -> str:
    key = f"-i {a.key} " if a.key else ""
    user = f"{a.user}@" if a.user else ""
    return (
        "check ssh_host/port/user/key in [deploy] or [deploy.hosts."
        f"{a.name}]; try: ssh {key}-p {a.port} {user}{a.ssh_host} true"
    )


def _nic_of(
    device: str | None, data_addr: str, nics: list[dict[str, Any]]
) -> dict[str, Any] | None:
    if device:
        return next((n for n in nics if n["name"] == device), None)
    return next((n for n in nics if data_addr in n.get("addresses", [])), None)


def _wanted_nics(host: Host) -> list[tuple[str, str | None, str, str]]:
    """(check suffix, interface, data address, topology endpoint) of each data NIC."""
    if not host.nics:
        return [("", host.nic, host.data_addr, host.name)]
    return [
        (f" {n.name}", n.device, n.data_addr, host.endpoint(k)) for k, n in enumerate(host.nics)
    ]


def nic_checks(testbed: Testbed, host: Host, nics: list[dict[str, Any]]) -> list[Check]:
    """State, link speed and MTU of every data NIC of ``host`` against the testbed's links."""
    out: list[Check] = []
    have_addrs = any(n.get("addresses") for n in nics)
    for suffix, device, addr, endpoint in _wanted_nics(host):
        nic = _nic_of(device, addr, nics)
        if nic is None and (device or have_addrs):
            what = f"NIC {device}" if device else f"no NIC holds data_addr {addr}"
            names = ", ".join(n["name"] for n in nics)
            out.append(
                Check(
                    "nic" + suffix,
                    "fail",
                    what + f" (host has {names})",
                    "set nic / data_addr in the testbed to this host's data NIC",
                )
            )
            continue
        if nic is None:
            out.append(
                Check("nic" + suffix, "skip", "no addresses known (genie not installed: no psutil)")
            )
            continue
        speed = nic["speed_mbit"]
        state = "up" if nic["up"] else "down"
        desc = f"{nic['name']} {state}, " + (f"{speed} Mbit/s" if speed else "speed unknown")
        if not nic["up"]:
            out.append(Check("nic" + suffix, "fail", desc, f"ip link set dev {nic['name']} up"))
        else:
            out.append(Check("nic" + suffix, "ok", desc))
        links = [lk for lk in testbed.links if endpoint in (lk.a, lk.b)]
        rates = [lk.rate for lk in links]
        if rates and speed and speed * 1e6 / 8 < max(rates) * 0.999:
            want = max(rates) * 8 / 1e9
            out.append(
                Check(
                    "link speed" + suffix,
                    "warn",
                    f"{speed / 1000:g} Gbit/s < testbed {want:g} Gbit/s",
                    "fix the testbed rate or the cabling/port",
                )
            )
        mtu = max((lk.mtu for lk in links), default=None)
        if mtu and nic["mtu"] < mtu:
            out.append(
                Check(
                    "mtu" + suffix,
                    "fail",
                    f"{nic['name']} {nic['mtu']} < testbed {mtu}",
                    f"ip link set dev {nic['name']} mtu {mtu} (or ansible role tuning)",
                )
            )
        else:
            out.append(Check("mtu" + suffix, "ok", f"{nic['name']} {nic['mtu']}"))
    return out


def evaluate(
    testbed: Testbed,
    host: Host,
    access: HostAccess,
    facts: dict[str, Any],
    clock: ClockOffset | None,
) -> list[Check]:
    """The checks of one reachable host from its probe facts."""
    out = [Check("reachable", "ok", access.target)]
    ver = facts["python"]["version"]
    if tuple(int(x) for x in ver.split(".")[:2]) < MIN_PYTHON:
        want = ".".join(map(str, MIN_PYTHON))
        out.append(
            Check(
                "python",
                "fail",
                f"{access.python} {ver}",
                f"install python{want} python{want}-venv, or set [deploy] python",
            )
        )
    elif not facts["python"]["venv_module"]:
        out.append(
            Check(
                "python", "fail", f"{access.python} {ver} without venv", "apt install python3-venv"
            )
        )
    else:
        out.append(Check("python", "ok", f"{access.python} {ver}"))
    gv = facts.get("genie_version")
    if not gv:
        out.append(
            Check(
                "genie",
                "fail",
                f"not installed under {facts['root']}",
                "genie deploy --testbed FILE",
            )
        )
    elif gv != __version__:
        out.append(
            Check(
                "genie", "warn", f"{gv} (controller {__version__})", "genie deploy --testbed FILE"
            )
        )
    else:
        out.append(Check("genie", "ok", gv))
    out += nic_checks(testbed, host, facts.get("nics") or [])
    if testbed.transport == "tcp":
        out += tcp_checks(testbed, facts)
    out.append(_rdma_check(testbed, host, facts.get("rdma") or []))
    if clock is None:
        out.append(Check("clock", "skip", "not measured"))
    else:
        val = f"{clock.offset_s * 1e3:+.2f} ms (± {clock.rtt_s * 500:.2f} ms)"
        bad = abs(clock.offset_s) - clock.rtt_s / 2 > CLOCK_WARN_S
        out.append(
            Check(
                "clock",
                "warn" if bad else "ok",
                val,
                "run NTP on every host (apt install chrony)" if bad else "",
            )
        )
    govs = facts.get("governors") or {}
    if not govs:
        out.append(Check("cpu governor", "skip", "no cpufreq (VM or fixed clock)"))
    elif set(govs) == {"performance"}:
        out.append(Check("cpu governor", "ok", "performance"))
    else:
        desc = ", ".join(f"{k} x{v}" for k, v in sorted(govs.items()))
        out.append(
            Check(
                "cpu governor",
                "warn",
                desc,
                "cpupower frequency-set -g performance (or ansible role tuning)",
            )
        )
    return out


def _rdma_check(testbed: Testbed, host: Host, devs: list[dict[str, Any]]) -> Check:
    needed = testbed.transport == "rdma" or bool(host.rdma_device)
    rxe = (
        f"modprobe rdma_rxe && rdma link add genie-rxe0 type rxe netdev {host.nic or 'NIC'}"
        " (soft-RoCE; ansible role rdma with genie_soft_roce=true)"
    )
    names = [d["name"] for d in devs]
    if not needed:
        return Check("rdma", "skip", ", ".join(names) or "none (tcp testbed)")
    dev = (
        next((d for d in devs if d["name"] == host.rdma_device), None)
        if host.rdma_device
        else (devs[0] if devs else None)
    )
    if dev is None:
        want = host.rdma_device or "any device"
        have = ", ".join(names) or "none"
        return Check(
            "rdma",
            "fail",
            f"{want} not in /sys/class/infiniband ({have})",
            f"apt install rdma-core; {rxe}",
        )
    active = [p for p in dev["ports"] if p["state"].upper() == "ACTIVE"]
    gids = [g for p in dev["ports"] for g in p["gids"]]
    if not active:
        return Check(
            "rdma",
            "fail",
            f"{dev['name']}: no ACTIVE port",
            f"bring up the netdev of {dev['name']} (ip link set dev ... up)",
        )
    if not gids:
        return Check(
            "rdma",
            "fail",
            f"{dev['name']}: no GIDs",
            "give the RoCE netdev an IP address (GIDs follow addresses)",
        )
    return Check("rdma", "ok", f"{dev['name']} port {active[0]['port']} ACTIVE, {len(gids)} GIDs")


_ECHO_TIME = (
    "import sys, time\n"
    "while sys.stdin.readline():\n"
    "    sys.stdout.write(repr(time.time()) + '\\n'); sys.stdout.flush()\n"
)


def measure_clock(remote: Remote, samples: int = CLOCK_SAMPLES) -> ClockOffset:
    """Host minus local wall clock, NTP-style over one SSH channel; the lowest-RTT sample."""
    name = remote.access.name
    cmd = f"{shlex.quote(remote.access.python)} -u -c {shlex.quote(_ECHO_TIME)}"
    best: ClockOffset | None = None
    try:
        stdin, stdout, _ = remote.conn.client.exec_command(cmd, timeout=10)
        for _ in range(samples):
            t0 = time.time()
            stdin.write("t\n")
            stdin.flush()
            line = stdout.readline()
            t1 = time.time()
            cand = ClockOffset(float(line) - (t0 + t1) / 2, t1 - t0)
            if best is None or cand.rtt_s < best.rtt_s:
                best = cand
        stdin.close()
    except (OSError, ValueError, EOFError) as exc:
        raise DeployError(f"{name}: clock: {exc or type(exc).__name__}") from None
    except Exception as exc:  # paramiko's SSHException and socket timeouts
        raise DeployError(f"{name}: clock: {type(exc).__name__}: {exc}") from None
    assert best is not None
    return best


def check_host(
    testbed: Testbed, cfg: DeployConfig, name: str, priority: int | None = None
) -> list[Check]:
    """Every check of host ``name`` (an SSH failure is a failed ``reachable`` check); an RDMA
    host also gets the RDMA preflight (PFC and ECN checked on ``priority``)."""
    host, access = testbed.host(name), cfg.hosts[name]
    rdma: list[Check] = []
    try:
        with Remote(access, cfg.connect_timeout) as remote:
            facts = probe(remote, "host check")
            clock = measure_clock(remote)
            if wants_rdma(testbed, host):
                rdma = preflight_remote(remote, testbed, host, priority)
    except DeployError as exc:
        msg = str(exc)
        if isinstance(exc, SshError):
            return [Check("reachable", "fail", msg.removeprefix(f"{name}: "), _ssh_hint(access))]
        return [
            Check("reachable", "ok", access.target),
            Check(
                "python",
                "fail",
                msg.removeprefix(f"{name}: "),
                "install Python >= 3.11 or set [deploy] python",
            ),
        ]
    out = evaluate(testbed, host, access, facts, clock)
    return [*out, *rdma, keys_check(cfg, name, facts), agent_check(host, cfg, facts)]


def keys_check(cfg: DeployConfig, name: str, facts: dict[str, Any]) -> Check:
    """Does the host's key directory match ``[deploy] keys`` (never reads a secret's bytes)?"""
    deploy_fix = "genie deploy --testbed FILE (rewrites ROOT/keys)"
    if not cfg.keys:
        return Check(
            "keys",
            "warn",
            "no [deploy] keys: any host that reaches the agent can drive it",
            'genie keys init --dir DIR; set [deploy] keys = "DIR"; genie deploy --testbed FILE',
        )
    plan, error = key_plan_or_error(cfg.keys, name)
    if plan is None:
        return Check("keys", "fail", error, "genie keys init --dir DIR")
    problem = key_problem(facts.get("keys"), plan)
    if problem and "controller.secret" in problem:
        return Check("keys", "fail", problem, f"rm {facts['root']}/keys/controller.secret")
    if problem:
        return Check("keys", "fail", problem, deploy_fix)
    n = sum(1 for f in plan.files if not f.rel.startswith("agent"))
    return Check("keys", "ok", f"{plan.agent_pair} pair + {n} controller key(s), dir 700")


def agent_check(host: Host, cfg: DeployConfig, facts: dict[str, Any]) -> Check:
    """Does the deployed agent say hello to this controller (with its keys, if set)?"""
    if not facts.get("genie_version"):
        return Check("agent", "skip", "genie not installed")
    hello = say_hello(host, AGENT_HELLO_S, cfg.keys)
    auth = "CURVE" if cfg.keys else "unauthenticated"
    if hello.reply is not None:
        r = hello.reply
        return Check("agent", "ok", f"pid {r.pid}, genie {r.version}, {auth}")
    if hello.busy:
        return Check("agent", "warn", f"held by another controller ({auth})", "")
    if "refused" in hello.error:
        return Check(
            "agent",
            "fail",
            hello.error,
            "the agent does not trust these keys: set [deploy] keys and genie deploy",
        )
    return Check(
        "agent",
        "fail",
        f"no hello at {host.control}: {hello.error}",
        f"genie agents restart {host.name} --testbed FILE, or genie deploy --testbed FILE",
    )


def check_hosts(
    testbed: Testbed, cfg: DeployConfig, names: Sequence[str], priority: int | None = None
) -> dict[str, list[Check]]:
    """Check the hosts ``names`` in parallel."""
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        results = list(pool.map(lambda n: check_host(testbed, cfg, n, priority), names))
    return dict(zip(names, results, strict=True))


def checks_json(results: dict[str, list[Check]]) -> list[dict[str, Any]]:
    """The results as JSON data: one entry per host with its checks."""
    return [
        {"host": n, "ok": all(c.status != "fail" for c in cs), "checks": [asdict(c) for c in cs]}
        for n, cs in results.items()
    ]
