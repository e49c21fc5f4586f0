"""The deploy side of a testbed file: SSH access and remote layout, from its ``[deploy]`` tables.

The testbed model knows nothing of SSH, so the fields live in a section the testbed loader never
sees: ``[deploy]`` (defaults for every host) and ``[deploy.hosts.NAME]`` (per-host overrides).
Their lines are blanked before the rest goes to ``loads_testbed``, so testbed errors keep their
line numbers. Keys: ``user``, ``port``, ``key`` (a private key path; never a password),
``ssh_host`` (per host; default the IP of ``control``), ``python``, ``remote_root``, ``service``
(auto | systemd | process), ``rdma_extra`` (auto | yes | no), ``wheelhouse`` (index | bundle),
``find_links`` and ``pip_args`` (lists), ``connect_timeout``, ``hello_timeout``, ``heartbeat``,
``host_keys`` (accept-new: a key that differs from known_hosts is refused, an unknown host is
accepted for this run; strict: unknown hosts are refused too), ``known_hosts`` (a path) and
``keys`` (the ``genie keys init`` directory on this machine: deploy gives every agent its own
pair and the trusted controller public keys, and the controller side speaks CURVE with them).

A password-like key anywhere in the file is refused: keys are given by path, and their
passphrases belong to ssh-agent.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from genie.errors import DeployConfigError, TestbedError
from genie.testbed import Testbed, loads_testbed
from genie.testbed.toml_lines import format_path, key_lines, line_of

Service = Literal["auto", "systemd", "process"]
RdmaExtra = Literal["auto", "yes", "no"]
Wheelhouse = Literal["index", "bundle"]
HostKeys = Literal["accept-new", "strict"]

DEFAULT_REMOTE_ROOT = "~/.genie"
_SECRET_KEY = re.compile(r"(pass(word|wd|phrase)?|secret|token|credential)s?$", re.IGNORECASE)
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_HOST_FIELDS = {
    "ssh_host", "user", "port", "key", "python", "remote_root", "host_keys", "known_hosts",
}  # fmt: skip
_DEFAULT_FIELDS = _HOST_FIELDS - {"ssh_host"} | {
    "service",
    "rdma_extra",
    "wheelhouse",
    "find_links",
    "pip_args",
    "connect_timeout",
    "hello_timeout",
    "heartbeat",
    "hosts",
    "keys",
}


class HostAccess(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one testbed host over SSH and where genie lives on it."""

    name: str
    ssh_host: str
    port: int = 22
    user: str | None = None  # None: from ~/.ssh/config or the local user
    key: str | None = None  # private key path; None: ssh-agent / ~/.ssh/config / default keys
    python: str = "python3"
    remote_root: str = DEFAULT_REMOTE_ROOT
    host_keys: HostKeys = "accept-new"  # strict: refuse hosts missing from known_hosts
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts

    @property
    def target(self) -> str:
        """``user@host:port`` for messages."""
        who = f"{self.user}@" if self.user else ""
        return f"{who}{self.ssh_host}:{self.port}"


class DeployConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Options of a deploy that are the same for every host, plus each host's access."""

    hosts: dict[str, HostAccess]
    service: Service = "auto"
    rdma_extra: RdmaExtra = "auto"
    wheelhouse: Wheelhouse = "index"
    find_links: tuple[str, ...] = ()
    pip_args: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    hello_timeout: float = 20.0
    heartbeat: float = 0.5
    keys: str | None = None  # local `genie keys init` directory; None: no CURVE


def refuse_secrets(text: str, data: dict[str, Any], source: str) -> None:
    """Raise DeployConfigError if any key in the parsed TOML looks like a password or secret."""
    lines = key_lines(text)

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                p = (*path, k)
                if _SECRET_KEY.search(k) and not isinstance(v, dict | list):
                    line = line_of(lines, p)
                    where = f"{source}:{line}" if line else source
                    raise DeployConfigError(
                        f"{where}: {format_path(p)}: passwords and secrets are refused in a "
                        'testbed file; give an SSH key by path (key = "~/.ssh/id_ed25519") '
                        "and let ssh-agent hold its passphrase"
                    )
                walk(v, p)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(data, ())


def strip_deploy_tables(text: str) -> str:
    """Blank the lines of every ``[deploy]`` / ``[deploy.*]`` table, keeping line numbers."""
    out: list[str] = []
    inside = False
    for raw in text.splitlines():
        m = _HEADER.match(raw)
        if m:
            first = m.group(1).split(".")[0].strip().strip('"')
            inside = first == "deploy"
        out.append("" if inside else raw)
    return "\n".join(out) + "\n"


def _field(table: dict[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    value = table[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        want = " or ".join(t.__name__ for t in types)
        raise DeployConfigError(f"{where}.{key}: must be {want}, got {value!r}")
    return value


def _access(name: str, default_host: str, table: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in table:
        if key not in _HOST_FIELDS:
            known = ", ".join(sorted(_HOST_FIELDS))
            raise DeployConfigError(f"{where}.{key}: unknown key (known: {known})")
    for key in ("ssh_host", "user", "key", "python", "remote_root", "known_hosts"):
        if key in table:
            out[key] = _field(table, key, (str,), where)
    if "host_keys" in table:
        value = _field(table, "host_keys", (str,), where)
        if value not in ("accept-new", "strict"):
            raise DeployConfigError(
                f"{where}.host_keys: must be accept-new or strict; got {value!r}"
            )
        out["host_keys"] = value
    if "port" in table:
        port = _field(table, "port", (int,), where)
        if not 0 < port < 65536:
            raise DeployConfigError(f"{where}.port: must be 1..65535, got {port}")
        out["port"] = port
    for key in ("key", "known_hosts"):
        if key in out:
            out[key] = os.path.expanduser(out[key])
    return out


def parse_deploy(data: dict[str, Any], testbed: Testbed, source: str) -> DeployConfig:
    """Build the DeployConfig of ``testbed`` from the parsed ``[deploy]`` table (may be absent)."""
    dep = data.get("deploy", {})
    if not isinstance(dep, dict):
        raise DeployConfigError(f"{source}: deploy: must be a table ([deploy])")
    for key in dep:
        if key not in _DEFAULT_FIELDS:
            known = ", ".join(sorted(_DEFAULT_FIELDS))
            raise DeployConfigError(f"{source}: deploy.{key}: unknown key (known: {known})")
    defaults = _access("", "", {k: v for k, v in dep.items() if k in _HOST_FIELDS}, "deploy")
    per_host = dep.get("hosts", {})
    if not isinstance(per_host, dict):
        raise DeployConfigError(f"{source}: deploy.hosts: must be tables [deploy.hosts.NAME]")
    names = {h.name for h in testbed.hosts}
    for name in per_host:
        if name not in names:
            raise DeployConfigError(
                f"{source}: deploy.hosts.{name}: no such host in the testbed "
                f"(hosts: {', '.join(sorted(names))})"
            )
    hosts: dict[str, HostAccess] = {}
    for h in testbed.hosts:
        table = per_host.get(h.name, {})
        if not isinstance(table, dict):
            raise DeployConfigError(f"{source}: deploy.hosts.{h.name}: must be a table")
        fields = {**defaults, **_access(h.name, h.control_ip, table, f"deploy.hosts.{h.name}")}
        fields.setdefault("ssh_host", h.control_ip)
        hosts[h.name] = HostAccess(name=h.name, **fields)
    opts: dict[str, Any] = {}
    for key, choices in (
        ("service", ("auto", "systemd", "process")),
        ("rdma_extra", ("auto", "yes", "no")),
        ("wheelhouse", ("index", "bundle")),
    ):
        if key in dep:
            value = _field(dep, key, (str,), "deploy")
            if value not in choices:
                raise DeployConfigError(
                    f"deploy.{key}: must be one of {', '.join(choices)}; got {value!r}"
                )
            opts[key] = value
    for key in ("find_links", "pip_args"):
        if key in dep:
            value = _field(dep, key, (list,), "deploy")
            if not all(isinstance(x, str) for x in value):
                raise DeployConfigError(f"deploy.{key}: must be a list of strings")
            opts[key] = tuple(value)
    if "keys" in dep:
        value = _field(dep, "keys", (str,), "deploy")
        opts["keys"] = os.path.expanduser(value)
    for key in ("connect_timeout", "hello_timeout", "heartbeat"):
        if key in dep:
            value = float(_field(dep, key, (int, float), "deploy"))
            if value <= 0:
                raise DeployConfigError(f"deploy.{key}: must be positive, got {value}")
            opts[key] = value
    return DeployConfig(hosts=hosts, **opts)


def loads_deploy(text: str, source: str = "<testbed>") -> tuple[Testbed, DeployConfig]:
    """Parse a testbed file's text into its Testbed and DeployConfig; refuse secrets."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        loads_testbed(text, source)  # raises a TestbedError with the line
        raise
    refuse_secrets(text, data, source)
    stripped = strip_deploy_tables(text)
    try:
        rest = tomllib.loads(stripped)
    except tomllib.TOMLDecodeError as exc:
        raise DeployConfigError(f"{source}: cannot separate the [deploy] tables: {exc}") from None
    if "deploy" in rest:
        raise DeployConfigError(
            f"{source}: write deploy settings as [deploy] / [deploy.hosts.NAME] tables, "
            "not as dotted or inline keys"
        )
    testbed = loads_testbed(stripped, source)
    return testbed, parse_deploy(data, testbed, source)


def load_deploy(path: str | Path) -> tuple[Testbed, DeployConfig]:
    """Read the testbed file at ``path``: its Testbed and its DeployConfig."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TestbedError(f"{p}: cannot read testbed file: {exc.strerror or exc}") from None
    return loads_deploy(text, str(p))


def select_hosts(testbed: Testbed, names: str | None) -> list[str]:
    """The host names of ``--hosts a,b`` (all hosts when None); unknown names are an error."""
    all_names = [h.name for h in testbed.hosts]
    if not names:
        return all_names
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in all_names]
    if unknown:
        raise DeployConfigError(
            f"--hosts: unknown host(s) {', '.join(unknown)} (testbed has {', '.join(all_names)})"
        )
    return [n for n in all_names if n in wanted]
