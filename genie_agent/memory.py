"""Giving a job's memory back to the operating system once the job is dropped.

A job's buffers are large numpy arrays; freed, most return to glibc's heaps and stay in the
process (glibc keeps freed memory for reuse, and its mmap threshold grows to 32 MiB after the
first large free), so an agent would hold a finished job's peak for good. ``release_memory`` runs
the garbage collector (buffers held in reference cycles) and then ``malloc_trim(0)``, which hands
every heap's free pages back; on a C library without it (musl, macOS) only the collector runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import time
from collections.abc import Callable
from pathlib import Path


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None where the C library has none)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def rss_bytes() -> int:
    """This process's resident memory (0 where /proc is not there)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def release_memory() -> str:
    """Collect garbage and trim the C heaps; one line saying what it gave back."""
    before = rss_bytes()
    t0 = time.perf_counter()
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    after = rss_bytes()
    how = "gc + malloc_trim" if trim is not None else "gc (no malloc_trim here)"
    return (
        f"memory: {how} in {(time.perf_counter() - t0) * 1e3:.0f} ms: resident "
        f"{before / 2**20:.0f} -> {after / 2**20:.0f} MiB"
    )
