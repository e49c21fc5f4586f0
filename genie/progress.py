"""Progress on stderr for long work: a bar when the amount is known, a spinner when it is not.

Shown only on a terminal and never with ``genie -q`` (``set_quiet``), so pipes and logs stay
clean. Both are context managers that clear themselves when the work ends:

* ``bar(description, total, unit)`` yields a ``Bar`` (``advance``, ``describe``);
* ``stage(description)`` yields a ``Stage`` (``describe``): a spinner with the elapsed time.

With progress off they yield objects whose methods do nothing, so callers never branch.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Turn progress off (``genie -q``) or back on."""
    global _quiet
    _quiet = quiet


def enabled() -> bool:
    """True when progress is drawn: stderr is a terminal and ``-q`` was not given."""
    return not _quiet and sys.stderr.isatty()


class Bar:
    """A progress bar's handle (no-op when progress is off)."""

    def __init__(self, progress: Any = None, task: Any = None, total: float = 0, unit: str = ""):
        self._p, self._t, self._total, self._unit, self._done = progress, task, total, unit, 0.0

    def advance(self, n: float = 1) -> None:
        """Count ``n`` more units done."""
        if self._p is not None:
            self._done += n
            count = f"{self._done:g}/{self._total:g} {self._unit}".rstrip()
            self._p.update(self._t, advance=n, count=count)

    def describe(self, text: str) -> None:
        """Change the description."""
        if self._p is not None:
            self._p.update(self._t, description=text)


class Stage(Bar):
    """A spinner's handle: ``describe`` what is going on (no-op when progress is off)."""


_live: Any = None  # the one rich Progress on screen; nested bars and stages join it as tasks
_depth = 0


@contextlib.contextmanager
def _task(description: str, total: float | None, unit: str) -> Iterator[tuple[Any, Any]]:
    global _live, _depth
    if _live is None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        _live = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        _live.start()
    _depth += 1
    first = f"0/{total:g} {unit}".rstrip() if total is not None else ""
    task = _live.add_task(description, total=total, count=first)
    try:
        yield _live, task
    finally:
        _live.remove_task(task)
        _depth -= 1
        if _depth == 0:
            _live.stop()
            _live = None


@contextlib.contextmanager
def bar(description: str, total: float, unit: str = "") -> Iterator[Bar]:
    """A bar of ``total`` units with the elapsed time."""
    if not enabled():
        yield Bar()
        return
    with _task(description, total, unit) as (p, t):
        yield Bar(p, t, total, unit)


@contextlib.contextmanager
def stage(description: str) -> Iterator[Stage]:
    """A spinner with the elapsed time, for work whose amount is not known."""
    if not enabled():
        yield Stage()
        return
    with _task(description, None, "") as (p, t):
        yield Stage(p, t)
