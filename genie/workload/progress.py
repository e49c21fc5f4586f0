"""A progress bar on stderr for per-rank work (reading, transforming, writing rank files).

Shown only when stderr is a terminal and there are at least two steps; otherwise a no-op, so
pipes, tests and JSON output stay clean.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[], None]]:
    """Yield ``advance()``, which moves a bar of ``total`` steps labelled ``what`` one step."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task(what, total=total)
    with bar:
        yield lambda: bar.advance(task)
