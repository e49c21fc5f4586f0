"""Run one function over many items: in a local process pool, or on a Dask cluster.

``run_all(fn, items, workers=N, dask=ADDRESS, on_result=cb)`` returns the results in the
order of ``items``; ``cb(index, result)`` hears each as it arrives (for progress). ``fn`` must
be importable by name (a module-level function) and its items and results picklable. Locally a
pool of ``workers`` processes (default: every core; ``spawn``, so no lock or thread of this
process is inherited, and a script starts the work under ``if __name__ == "__main__":``, else
its workers die: a RuntimeFault); with one worker or one item it runs here. With ``dask`` the
items go to the scheduler at that address (``distributed.Client``; the ``sweep`` extra).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from genie.errors import RuntimeFault
from genie.extras import require

CONNECT_TIMEOUT_S = 5


def default_workers() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


def run_all(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    *,
    workers: int | None = None,
    dask: str | None = None,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(x) for x in items]``, in parallel (see the module docstring)."""
    if dask:
        return _dask(fn, items, dask, on_result)
    n = min(workers or default_workers(), len(items))
    out: list[Any] = [None] * len(items)
    if n <= 1:
        for i, x in enumerate(items):
            out[i] = fn(x)
            if on_result:
                on_result(i, out[i])
        return out
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
            try:
                for fut in as_completed(futures):
                    i = futures[fut]
                    out[i] = fut.result()
                    if on_result:
                        on_result(i, out[i])
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    except BrokenProcessPool:
        raise RuntimeFault(
            "a worker process died before it finished (from a script, start the work under "
            "`if __name__ == '__main__':`, which spawned workers import; or use one worker)"
        ) from None
    return out


def _dask(fn, items, address: str, on_result) -> list[Any]:
    """The items as Dask futures on the cluster at ``address``."""
    distributed = require("distributed", "sweep")
    try:
        client = distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise RuntimeFault(f"no Dask scheduler at {address}: {exc}") from None
    try:
        futures = client.map(fn, list(items), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[Any] = [None] * len(items)
        for fut in distributed.as_completed(futures):
            i = index[fut.key]
            out[i] = fut.result()
            if on_result:
                on_result(i, out[i])
        return out
    finally:
        client.close()
