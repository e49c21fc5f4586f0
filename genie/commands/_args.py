"""Checked argument types for the CLI: every number is validated when it is parsed.

Each factory returns an argparse ``type`` that turns the text into the value or raises
``argparse.ArgumentTypeError`` with a one-line reason (finite, in range, with its unit), so a
bad number never reaches the code that would crash or run away on it. The parsers of
``genie.units`` do the unit work; this module only bounds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from genie.errors import UnitError
from genie.units import (
    parse_bandwidth,
    parse_duration,
    parse_ratio,
    parse_size,
    parse_size_sweep,
)


def integer(lo: int = 1, hi: int = 1 << 31) -> Callable[[str], int]:
    """An integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text, 0) if isinstance(text, str) else int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def real(lo: float = 0.0, hi: float = math.inf, *, lo_open: bool = True) -> Callable[[str], float]:
    """A finite number above ``lo`` (or at it, with ``lo_open=False``) and at most ``hi``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        low_ok = value > lo if lo_open else value >= lo
        if not (math.isfinite(value) and low_ok and value <= hi):
            side = ">" if lo_open else ">="
            top = "" if math.isinf(hi) else f" and <= {hi:g}"
            raise argparse.ArgumentTypeError(f"must be finite, {side} {lo:g}{top}; got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def _wrap(fn: Callable, name: str) -> Callable[[str], object]:
    def parse(text: str):
        try:
            return fn(text)
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


bandwidth = _wrap(parse_bandwidth, "bandwidth")
duration = _wrap(parse_duration, "duration")
ratio = _wrap(parse_ratio, "ratio")
sweep = _wrap(parse_size_sweep, "size sweep")


def size(lo: int = 0, hi: int = 1 << 40) -> Callable[[str], int]:
    """A byte count (``64MiB``, ``4096``) in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = parse_size(text)
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi} bytes, got {text!r}")
        return value

    parse.__name__ = "size"
    return parse


port = integer(0, 65535)


def add_comm_concurrency(p: argparse.ArgumentParser) -> None:
    """``--comm-concurrency N``: NCCL's stream order (``genie.sim.streams``)."""
    p.add_argument(
        "--comm-concurrency",
        type=integer(0, 1024),
        default=1,
        help="collectives of one process group in flight at once on a rank, in issue order "
        "(1: NCCL's one stream per communicator; 0: no limit)",
    )


def add_trace_edges(p: argparse.ArgumentParser) -> None:
    """``--trace-edges``: replay PyTorch-derived traces with stream semantics, or as written."""
    p.add_argument(
        "--trace-edges",
        choices=("inferred", "explicit"),
        default="inferred",
        help="inferred (default): PyTorch-derived traces also get CUDA stream order and "
        "ProcessGroupNCCL's stream syncs (genie.workload.stream_rules); explicit: the trace's "
        "data_deps only",
    )


def add_streams(p) -> None:
    """``--streams``: TCP connections per rank pair, by default the testbed's flows."""
    p.add_argument(
        "--streams",
        type=integer(1, 64),
        default=None,
        help="TCP connections per rank pair (default: the testbed's flows, [routing] channels x "
        "qps, which the model prices too)",
    )
