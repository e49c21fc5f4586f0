"""Deploy genie to testbed hosts over SSH: wheel, venv, agent config, service, hello.

Per host, in its own thread: connect, probe (Python, RDMA devices, systemd, what is already
there), install the wheel into ``ROOT/venv`` unless the stamp on the host says this very wheel
(and extras) is installed, write ``ROOT/keys`` when ``[deploy] keys`` is set and the host's copy
differs (see ``genie.deploy.keyfiles``), write ``ROOT/agent.json``, (re)start the agent only if
something changed or it is not running, and wait for its hello on the control address (over
CURVE with the controller's keys when set). A host that runs RDMA jobs also gets the RDMA
preflight of ``genie hosts check`` right after the probe (its findings ride on the outcome;
they do not stop the deploy). A failure on one host is that host's outcome; the others go on.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genie import __version__
from genie.deploy.check import Check
from genie.deploy.config import DeployConfig, HostAccess
from genie.deploy.hello import say_hello
from genie.deploy.keyfiles import KEYS_DIR, plan_keys, remove_keys, write_keys
from genie.deploy.rdma_checks import wants_rdma
from genie.deploy.rdma_preflight import preflight_remote
from genie.deploy.ssh import Remote, probe
from genie.deploy.wheel import bundle_dependencies, wheel_digest
from genie.errors import DeployError
from genie.testbed import Host, Testbed
from genie.wire.liveness import MISSED_BEATS_LIMIT

MIN_PYTHON = (3, 11)
Progress = Callable[[str, str], None]


@dataclass
class HostOutcome:
    """What a deploy did on one host."""

    name: str
    ok: bool
    action: str  # installed | updated | restarted | unchanged | failed
    detail: str = ""
    version: str = ""
    agent_pid: int | None = None
    mode: str = ""
    extras: str = ""
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    preflight: list[Check] | None = None  # the RDMA preflight's rows (None: not an RDMA host)


@dataclass
class Artifacts:
    """What every host gets: the wheel, its digest, and dependency bundles built on demand."""

    wheel: Path
    digest: str
    wheelhouse: str = "index"
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bundles: dict[str, list[Path]] = field(default_factory=dict)

    @classmethod
    def of(cls, wheel: Path, wheelhouse: str = "index") -> Artifacts:
        """Artifacts for ``wheel``."""
        return cls(wheel=wheel, digest=wheel_digest(wheel), wheelhouse=wheelhouse)

    def bundle(self, extras: str) -> list[Path]:
        """Dependency wheels for ``extras`` (built once, shared by all host threads)."""
        with self._lock:
            if extras not in self._bundles:
                self._bundles[extras] = bundle_dependencies(self.wheel, extras)
            return self._bundles[extras]


def python_problem(facts: dict[str, Any], python: str) -> str | None:
    """Why the host's Python cannot run genie, with the fix; None if it can."""
    ver = facts["python"]["version"]
    parts = tuple(int(x) for x in ver.split(".")[:2])
    if parts < MIN_PYTHON:
        want = ".".join(map(str, MIN_PYTHON))
        return (
            f"{python} is Python {ver}; genie needs >= {want} "
            f"(install python{want} python{want}-venv, or set [deploy] python)"
        )
    if not facts["python"]["venv_module"] and not facts.get("venv_python"):
        return f"{python} has no venv module (install python3-venv)"
    return None


def agent_config(
    host: Host,
    access: HostAccess,
    root: str,
    service: str,
    heartbeat: float,
    keys: bool = False,
    missed_beats: int = MISSED_BEATS_LIMIT,
) -> str:
    """The agent config file written to ``ROOT/agent.json`` (stable text, for comparison).

    ``keys``: the agent serves CURVE with the key directory ``ROOT/keys``. ``missed_beats``:
    the testbed's liveness rule (written only when not genie's default, so configs written
    before it existed compare equal).
    """
    cfg: dict[str, Any] = {
        "id": host.name,
        "listen": host.control,
        "data_addr": ",".join(host.nic_addrs()),  # one per NIC, the agent's own first
        "heartbeat": heartbeat,
        "service": service,
        "root": root,
    }
    if keys:
        cfg["keys"] = f"{root}/{KEYS_DIR}"
    if missed_beats != MISSED_BEATS_LIMIT:
        cfg["missed_beats"] = missed_beats
    return json.dumps(cfg, sort_keys=True)


class HostDeploy:
    """The deploy of one host (call ``run``)."""

    def __init__(
        self,
        host: Host,
        access: HostAccess,
        cfg: DeployConfig,
        art: Artifacts,
        progress: Progress,
        testbed: Testbed | None = None,
    ) -> None:
        self.host, self.access, self.cfg, self.art = host, access, cfg, art
        self.testbed = testbed  # given: an RDMA host gets the RDMA preflight
        self.say = lambda stage: progress(host.name, stage)
        self.timings: dict[str, float] = {}
        self.preflight: list[Check] | None = None

    def _timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        self.say(stage)
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.monotonic() - t0

    def run(self) -> HostOutcome:
        """Deploy; never raises for a host problem (the outcome says what went wrong)."""
        t0 = time.monotonic()
        try:
            out = self._run()
        except DeployError as exc:
            msg = str(exc)
            prefix = f"{self.host.name}: "
            out = HostOutcome(self.host.name, False, "failed", msg.removeprefix(prefix))
        except Exception as exc:  # a bug or an unexpected library error: still one line
            out = HostOutcome(self.host.name, False, "failed", f"{type(exc).__name__}: {exc}")
        out.seconds = time.monotonic() - t0
        out.timings = dict(self.timings)
        out.preflight = self.preflight
        self.say("ok" if out.ok else "failed")
        return out

    def _run(self) -> HostOutcome:
        name = self.host.name
        remote = Remote(self.access, self.cfg.connect_timeout)
        try:
            self._timed("connect", remote.open)
            facts = self._timed("probe", lambda: probe(remote))
            problem = python_problem(facts, self.access.python)
            if problem:
                raise DeployError(problem)
            tb = self.testbed
            if tb is not None and wants_rdma(tb, self.host):
                self.preflight = self._timed(
                    "preflight", lambda: preflight_remote(remote, tb, self.host)
                )
            root = facts["root"]
            extras = self._extras(facts)
            stamp = {"wheel": self.art.digest, "extras": extras, "version": __version__}
            old = facts.get("stamp") or {}
            have_venv = bool(facts.get("venv_python"))
            fresh = have_venv and old.get("wheel") == stamp["wheel"] and old.get("extras") == extras
            action = "unchanged"
            if not fresh:
                self._timed("install", lambda: self._install(remote, facts, root, extras))
                remote.write_text(f"{root}/stamp.json", json.dumps(stamp), f"{name}: stamp")
                action = "updated" if facts.get("genie_version") else "installed"
            service = self._service(facts)
            keys = self.cfg.keys
            keys_changed = self._timed("keys", lambda: self._keys(remote, facts, root))
            beats = self.testbed.missed_beats if self.testbed else MISSED_BEATS_LIMIT
            text = agent_config(
                self.host,
                self.access,
                root,
                service,
                self.cfg.heartbeat,
                keys=bool(keys),
                missed_beats=beats,
            )
            changed = facts.get("agent_config") != text or keys_changed
            if facts.get("agent_config") != text:
                remote.write_text(f"{root}/agent.json", text, f"{name}: agent config")
            qroot = shlex.quote(root)
            ctl = f"{qroot}/venv/bin/python -m genie.deploy.agentctl {qroot}"
            if action == "unchanged" and not changed:
                st = self._agentctl(remote, ctl, "status")
                if st.get("running"):
                    hello = self._timed("hello", lambda: say_hello(self.host, 3.0, keys))
                    if hello.alive:
                        return HostOutcome(
                            name,
                            True,
                            "unchanged",
                            "agent already running and answering",
                            version=hello.reply.version if hello.reply else "",
                            agent_pid=st.get("agent_pid"),
                            mode=st.get("mode", service),
                            extras=extras,
                        )
                action = "restarted"
            elif action == "unchanged":
                action = "restarted"
            st = self._timed("start", lambda: self._agentctl(remote, ctl, "restart"))
            if st.get("action") == "failed":
                raise DeployError(f"agent did not start: {st.get('error', 'no reason given')}")
            hello = self._timed("hello", lambda: say_hello(self.host, self.cfg.hello_timeout, keys))
            if hello.reply is None:
                raise DeployError(
                    f"agent runs (pid {st.get('agent_pid')}) but no hello at "
                    f"{self.host.control} within {self.cfg.hello_timeout:.0f} s: {hello.error}"
                )
            r = hello.reply
            if r.version != __version__:
                raise DeployError(f"agent says genie {r.version}, deployed {__version__}")
            return HostOutcome(
                name,
                True,
                action,
                f"agent pid {r.pid} said hello",
                version=r.version,
                agent_pid=r.pid,
                mode=st.get("mode", service),
                extras=extras,
            )
        finally:
            remote.close()

    def _keys(self, remote: Remote, facts: dict[str, Any], root: str) -> bool:
        """Make ``ROOT/keys`` match ``[deploy] keys``; True if anything was written or removed."""
        what = f"{self.host.name}: keys"
        have = facts.get("keys")
        if not self.cfg.keys:
            if have is None:
                return False
            remove_keys(remote, root, what)
            return True
        plan = plan_keys(self.cfg.keys, self.host.name)
        if have is not None and have.get("digest") == plan.digest:
            return False
        write_keys(remote, root, plan, what)
        return True

    def _extras(self, facts: dict[str, Any]) -> str:
        """``rdma`` (PyPI pyverbs) when asked, or on auto for an RDMA host without the
        distribution's python3-pyverbs (which genie loads from the system; preferred, since
        pyverbs must match the host's rdma-core)."""
        if self.cfg.rdma_extra == "yes":
            return "rdma"
        if self.cfg.rdma_extra == "auto" and facts["rdma"] and not facts.get("pyverbs_distro"):
            return "rdma"
        return ""

    def _service(self, facts: dict[str, Any]) -> str:
        if self.cfg.service == "auto":
            return "systemd" if facts.get("systemd_user") else "process"
        if self.cfg.service == "systemd" and not facts.get("systemd_user"):
            raise DeployError("service = systemd, but systemd does not run as this user's manager")
        return self.cfg.service

    def _agentctl(self, remote: Remote, ctl: str, what: str) -> dict[str, Any]:
        res = remote.run(f"{ctl} {what}", f"{self.host.name}: agent {what}", check=False)
        try:
            return json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise DeployError(f"agent {what}: {last[:300]}") from None

    def _install(self, remote: Remote, facts: dict[str, Any], root: str, extras: str) -> None:
        name = self.host.name
        q = shlex.quote
        remote.run(f"mkdir -p {q(root)}/dist {q(root)}/wheels", f"{name}: mkdir {root}")
        remote_wheel = f"{root}/dist/{self.art.wheel.name}"
        self._timed("copy", lambda: remote.put(self.art.wheel, remote_wheel, f"{name}: copy"))
        if not facts.get("venv_python"):
            py = q(self.access.python)
            self._timed("venv", lambda: remote.run(f"{py} -m venv {q(root)}/venv", f"{name}: venv"))
        pip = f"{q(root)}/venv/bin/python -m pip"
        args = ["install", "-q", "--disable-pip-version-check"]
        if self.art.wheelhouse == "bundle":
            self._timed("copy", lambda: self._copy_bundle(remote, root, extras))
            args += ["--no-index", "--find-links", f"{root}/wheels"]
        for fl in self.cfg.find_links:
            args += ["--find-links", fl]
        args += list(self.cfg.pip_args)
        target = f"{remote_wheel}[{extras}]" if extras else remote_wheel
        if facts.get("genie_version"):
            remote.run(f"{pip} uninstall -y -q genie", f"{name}: pip uninstall", check=False)
        cmd = f"{pip} {' '.join(q(a) for a in args)} {q(target)}"
        self._timed("pip", lambda: remote.run(cmd, f"{name}: pip install"))
        keep = q(self.art.wheel.name)
        remote.run(
            f'cd {q(root)}/dist && for f in genie-*.whl; do [ "$f" = {keep} ] || rm -f "$f"; done',
            f"{name}: tidy dist",
            check=False,
        )

    def _copy_bundle(self, remote: Remote, root: str, extras: str) -> None:
        wheels = self.art.bundle(extras)
        res = remote.run(f"ls {shlex.quote(root)}/wheels", f"{self.host.name}: list wheels")
        have = set(res.stdout.split())
        for w in wheels:
            if w.name not in have:
                remote.put(w, f"{root}/wheels/{w.name}", f"{self.host.name}: copy {w.name}")


def deploy(
    testbed: Testbed,
    cfg: DeployConfig,
    names: Sequence[str],
    art: Artifacts,
    progress: Progress | None = None,
    max_workers: int = 16,
) -> list[HostOutcome]:
    """Deploy to the hosts ``names`` in parallel; one outcome per host, in testbed order."""
    say = progress or (lambda _h, _s: None)
    jobs = [HostDeploy(testbed.host(n), cfg.hosts[n], cfg, art, say, testbed) for n in names]
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(jobs))) as pool:
        return list(pool.map(lambda j: j.run(), jobs))
