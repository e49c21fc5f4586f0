"""What genie has built on this machine: one JSON record per testbed that is up.

Kept in a genie-prefixed directory (``$GENIE_STATE_DIR``, else ``/run/genie`` when /run is
writable, else ``/tmp/genie-state``) so ``genie testbed clean`` can find agents by pid even
after a crash. Records are written before anything is built, so a half-built testbed is known.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from genie.errors import TestbedError


class AgentRecord(msgspec.Struct, frozen=True):
    """An agent process genie started in a host namespace."""

    host: str
    netns: str
    pid: int
    create_time: float  # psutil's process start time, to never kill a recycled pid
    listen: str
    log: str


class TestbedState(msgspec.Struct):
    """One testbed that is (or was being) built."""

    __test__ = False  # not a pytest test class

    name: str
    prefix: str
    source: str
    namespaces: list[str]
    root_links: list[str]
    agents: list[AgentRecord] = msgspec.field(default_factory=list)


def state_dir() -> Path:
    """The directory holding genie's testbed records (created on demand)."""
    env = os.environ.get("GENIE_STATE_DIR")
    if env:
        d = Path(env)
    elif os.access("/run", os.W_OK):
        d = Path("/run/genie")
    else:
        d = Path("/tmp/genie-state")
    if "genie" not in d.name:
        raise TestbedError(f"state directory {d} must have 'genie' in its name")
    return d


def record_path(name: str, prefix: str) -> Path:
    """Where the record of testbed ``name`` built with namespace ``prefix`` lives."""
    return state_dir() / f"testbed-{prefix.rstrip('-')}-{name}.json"


def save(st: TestbedState) -> Path:
    """Write ``st`` atomically and return its path."""
    path = record_path(st.name, st.prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(st))
    os.replace(tmp, path)
    return path


def load(path: Path) -> TestbedState | None:
    """Read one record; None if it is gone or unreadable."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=TestbedState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def load_all() -> list[tuple[Path, TestbedState | None]]:
    """Every record in the state directory (None for unreadable ones)."""
    d = state_dir()
    if not d.is_dir():
        return []
    return [(p, load(p)) for p in sorted(d.glob("testbed-*.json"))]


def remove(path: Path) -> None:
    """Delete a record (no error if it is already gone)."""
    path.unlink(missing_ok=True)
