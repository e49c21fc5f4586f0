"""CURVE key pairs for the control channel: where they live, how they are made and loaded.

A key directory holds z85 text files, one key per file::

    controller.public   controller.secret (0600)   the controller's pair
    agent.public        agent.secret      (0600)   the pair every agent uses by default
    agent-<id>.public   agent-<id>.secret (0600)   optional: a pair for one agent
    trusted/<name>.public                          more controller keys the agents accept

An agent serves CURVE with its pair (``agent-<id>`` if present, else ``agent``) and accepts a
controller only if that controller's public key is ``controller.public`` or in ``trusted/``. A
controller connects with its pair and the agent's public key. Agents need only their own pair
and the trusted controller public keys; a controller needs only its pair and agent public keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from genie.errors import UsageError

CONTROLLER = "controller"
AGENT = "agent"
TRUSTED_DIR = "trusted"
KEY_ENV = "GENIE_KEYS"  # an agent started without --keys reads its key directory from here


@dataclass(frozen=True)
class KeyPair:
    """One CURVE key pair, z85 bytes (40 characters each)."""

    public: bytes
    secret: bytes


def _write(path: Path, data: bytes, secret: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600 if secret else 0o644)
    try:
        os.fchmod(fd, 0o600 if secret else 0o644)
        os.write(fd, data + b"\n")
    finally:
        os.close(fd)


def _read_key(path: Path) -> bytes:
    try:
        raw = path.read_bytes().strip()
    except OSError as exc:
        raise UsageError(f"cannot read key {path}: {exc.strerror}") from None
    if len(raw) != 40:
        raise UsageError(f"{path} is not a CURVE key (want 40 z85 characters, got {len(raw)})")
    try:
        z85.decode(raw)
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{path} is not a z85 CURVE key") from None
    return raw


def write_pair(directory: Path, name: str, overwrite: bool = False) -> KeyPair:
    """Make a fresh pair ``name`` in ``directory`` (secret file 0600); refuse to overwrite."""
    pub_path, sec_path = directory / f"{name}.public", directory / f"{name}.secret"
    if not overwrite and (pub_path.exists() or sec_path.exists()):
        raise UsageError(f"key {name} already exists in {directory} (use --force to replace it)")
    public, secret = zmq.curve_keypair()
    _write(sec_path, secret, secret=True)
    _write(pub_path, public, secret=False)
    return KeyPair(public, secret)


def init_keys(
    directory: str | os.PathLike, agents: list[str] | None = None, overwrite: bool = False
) -> dict[str, KeyPair]:
    """Make the controller pair, the shared agent pair and one pair per name in ``agents``."""
    if not zmq.has("curve"):
        raise UsageError("this libzmq has no CURVE support")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / TRUSTED_DIR).mkdir(exist_ok=True)
    out = {CONTROLLER: write_pair(d, CONTROLLER, overwrite), AGENT: write_pair(d, AGENT, overwrite)}
    for a in agents or []:
        out[f"{AGENT}-{a}"] = write_pair(d, f"{AGENT}-{a}", overwrite)
    return out


def load_pair(directory: str | os.PathLike, name: str) -> KeyPair:
    """Read pair ``name`` from ``directory``; UsageError if missing or malformed."""
    d = Path(directory)
    sec = d / f"{name}.secret"
    mode = sec.stat().st_mode & 0o077 if sec.exists() else 0
    if mode:
        raise UsageError(f"{sec} is readable by others (chmod 600 it)")
    return KeyPair(_read_key(d / f"{name}.public"), _read_key(sec))


def agent_pair(directory: str | os.PathLike, agent_id: str) -> KeyPair:
    """The pair agent ``agent_id`` serves with: its own if present, else the shared one."""
    own = Path(directory) / f"{AGENT}-{agent_id}.secret"
    return load_pair(directory, f"{AGENT}-{agent_id}" if own.exists() else AGENT)


def agent_public(directory: str | os.PathLike, agent_id: str) -> bytes:
    """The public key a controller expects agent ``agent_id`` to serve with."""
    d = Path(directory)
    own = d / f"{AGENT}-{agent_id}.public"
    return _read_key(own if own.exists() else d / f"{AGENT}.public")


def trusted_controllers(directory: str | os.PathLike) -> set[bytes]:
    """Public keys of the controllers an agent accepts (z85 bytes); UsageError if none."""
    d = Path(directory)
    keys = set()
    if (d / f"{CONTROLLER}.public").exists():
        keys.add(_read_key(d / f"{CONTROLLER}.public"))
    if (d / TRUSTED_DIR).is_dir():
        keys |= {_read_key(p) for p in sorted((d / TRUSTED_DIR).glob("*.public"))}
    if not keys:
        raise UsageError(f"no trusted controller keys in {d} (controller.public or trusted/)")
    return keys


def fingerprint(public: bytes) -> str:
    """A short printable name of a public key (its first 8 z85 characters)."""
    return public[:8].decode(errors="replace")
