"""Which CURVE key files an agent host gets, and how deploy writes them to ``ROOT/keys``.

From the controller's ``genie keys init`` directory an agent gets only what it needs: its own
pair (``agent-ID`` if the directory has one, else the shared ``agent`` pair; secret 0600), the
controller's public key and ``trusted/*.public``. Never ``controller.secret``. The directory
and ``trusted/`` are 0700. The plan's digest (names, modes, bytes) is compared with the one the
host probe computes, so unchanged keys are not rewritten and changed ones are. Secret bytes are
sent over SFTP only, never on a command line, and never printed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from genie.deploy.remote_probe import keys_digest
from genie.errors import DeployConfigError, GenieError
from genie.keys import AGENT, CONTROLLER, TRUSTED_DIR, agent_pair, trusted_controllers

KEYS_DIR = "keys"
DIR_MODE = 0o700
SECRET_MODE = 0o600
PUBLIC_MODE = 0o644


@dataclass(frozen=True)
class KeyFile:
    """One file of the agent's key directory (``rel`` relative to ``ROOT/keys``)."""

    rel: str
    mode: int
    content: bytes

    def __repr__(self) -> str:  # never show a secret's bytes in a traceback or log
        return f"KeyFile({self.rel!r}, {self.mode:o})"


@dataclass(frozen=True)
class KeyPlan:
    """The key directory one agent host should have."""

    agent_pair: str  # agent-ID or agent
    files: tuple[KeyFile, ...]

    @property
    def digest(self) -> str:
        """The digest the host probe reports when the directory matches this plan."""
        entries = [("", DIR_MODE, b""), (f"{TRUSTED_DIR}/", DIR_MODE, b"")]
        entries += [(f.rel, f.mode, f.content) for f in self.files]
        return keys_digest(entries)

    @property
    def publics(self) -> dict[str, str]:
        """The public key files of the plan (relpath -> z85 text)."""
        return {f.rel: f.content.decode().strip() for f in self.files if f.rel.endswith(".public")}


def plan_keys(keys_dir: str, agent_id: str) -> KeyPlan:
    """The key files agent ``agent_id`` gets from ``keys_dir``; DeployConfigError if unusable."""
    d = Path(keys_dir)
    if not d.is_dir():
        raise DeployConfigError(
            f"[deploy] keys: {d} is not a directory (make it with `genie keys init --dir {d}`)"
        )
    own = f"{AGENT}-{agent_id}"
    name = own if (d / f"{own}.secret").exists() else AGENT
    try:
        pair = agent_pair(d, agent_id)
        trusted_controllers(d)  # at least one controller key, each well formed
    except GenieError as exc:
        raise DeployConfigError(f"[deploy] keys: {exc}") from None
    files = [
        KeyFile(f"{name}.public", PUBLIC_MODE, pair.public + b"\n"),
        KeyFile(f"{name}.secret", SECRET_MODE, pair.secret + b"\n"),
    ]
    ctl = d / f"{CONTROLLER}.public"
    if ctl.exists():
        files.append(KeyFile(ctl.name, PUBLIC_MODE, ctl.read_bytes().strip() + b"\n"))
    trusted = sorted((d / TRUSTED_DIR).glob("*.public")) if (d / TRUSTED_DIR).is_dir() else []
    for p in trusted:
        text = p.read_bytes().strip() + b"\n"
        files.append(KeyFile(f"{TRUSTED_DIR}/{p.name}", PUBLIC_MODE, text))
    return KeyPlan(name, tuple(files))


def key_plan_or_error(keys_dir: str, agent_id: str) -> tuple[KeyPlan | None, str]:
    """``plan_keys`` that returns its error text instead of raising."""
    try:
        return plan_keys(keys_dir, agent_id), ""
    except DeployConfigError as exc:
        return None, str(exc)


def write_keys(remote, root: str, plan: KeyPlan, what: str) -> None:
    """Replace ``root/keys`` on the host by exactly the plan's files (staged, then renamed)."""
    q = shlex.quote
    new, cur, old = (f"{root}/{KEYS_DIR}{s}" for s in (".new", "", ".old"))
    remote.run(
        f"umask 077 && rm -rf {q(new)} && mkdir -p {q(new)}/{TRUSTED_DIR} "
        f"&& chmod 700 {q(new)} {q(new)}/{TRUSTED_DIR}",
        f"{what}: stage keys",
    )
    for f in plan.files:
        remote.put_bytes(f.content, f"{new}/{f.rel}", f.mode, f"{what}: copy key {f.rel}")
    remote.run(
        f"rm -rf {q(old)} && {{ [ ! -e {q(cur)} ] || mv {q(cur)} {q(old)}; }} "
        f"&& mv {q(new)} {q(cur)} && rm -rf {q(old)}",
        f"{what}: install keys",
    )


def remove_keys(remote, root: str, what: str) -> None:
    """Remove ``root/keys`` from the host (keys no longer configured)."""
    remote.run(f"rm -rf {shlex.quote(f'{root}/{KEYS_DIR}')}", f"{what}: remove keys")


def key_problem(state: dict | None, plan: KeyPlan) -> str | None:
    """Why the host's key directory (probe ``keys`` facts) is not the plan's; None if it is."""
    if state is None:
        return "no key directory on the host"
    modes = state.get("modes", {})
    if f"{CONTROLLER}.secret" in modes or f"{TRUSTED_DIR}/{CONTROLLER}.secret" in modes:
        return "controller.secret is on the host (it belongs on the controller only)"
    if modes.get("", 0) & 0o077:
        return f"key directory is mode {modes.get('', 0):o}, not 700"
    for rel, mode in modes.items():
        if rel.endswith(".secret") and mode & 0o077:
            return f"{rel} is mode {mode:o}, not 600"
    if state.get("publics") != plan.publics:
        return "public keys differ from the controller's key directory"
    if state.get("digest") != plan.digest:
        return "key files differ from the controller's key directory"
    return None
