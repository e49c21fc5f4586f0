"""Repeats: each size run several times over, their spread said, a warning when large."""

from __future__ import annotations

import io

from genie.commands._bench_output import print_repeats
from genie.controller.results import SPREAD_WARN, Stats
from genie.controller.sweep import SizeRow


def _row(size: int, p50s: list[float]) -> SizeRow:
    xs = p50s or [1.0]  # a run without repeats still has its own statistics
    st = Stats(
        n=3 * len(xs),
        p50=sorted(xs)[len(xs) // 2],
        p99=max(xs),
        min=min(xs),
        max=max(xs),
        mean=sum(xs) / len(xs),
    )
    return SizeRow(
        size=size,
        count=size,
        dtype="uint8",
        n_ranks=4,
        stats=st,
        algbw=1.0,
        busbw=1.0,
        modeled_s=None,
        repeat_p50_s=p50s,
    )


def test_spread_is_max_over_min_of_the_repeats() -> None:
    assert abs(_row(1, [1.0, 1.05, 1.02]).spread - 0.05) < 1e-12
    assert _row(1, [2.0]).spread is None  # one repeat: nothing to compare
    assert _row(1, []).spread is None


def test_steady_repeats_print_their_spread_without_a_warning() -> None:
    out = io.StringIO()
    print_repeats([_row(4096, [1.0, 1.01, 1.02]), _row(65536, [2.0, 2.04, 2.02])], file=out)
    text = out.getvalue()
    assert "3 repeats per size" in text and "2.0% apart" in text and "KiB" in text
    assert "not steady" not in text


def test_repeats_further_apart_than_the_threshold_say_so() -> None:
    out = io.StringIO()
    hi = 1.0 + 2 * SPREAD_WARN
    print_repeats([_row(4096, [1.0, 1.0]), _row(1 << 20, [1.0, hi])], file=out)
    text = out.getvalue()
    assert "not steady" in text and "(1.0 MiB)" in text and f"{2 * SPREAD_WARN:.1%}" in text


def test_no_repeats_print_nothing() -> None:
    out = io.StringIO()
    print_repeats([_row(4096, [])], file=out)
    assert out.getvalue() == ""
