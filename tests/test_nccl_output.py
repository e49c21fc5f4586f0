"""The NCCL choice table's runner-up column: NCCL's next choice and its time against the chosen
one's, signed (a Simple ring's flag waits, which NCCL's tuner does not price, can make the
runner-up the faster)."""

from __future__ import annotations

from genie.commands._nccl_output import _next


def _choice(time_s: float, runner_time_s: float | None) -> dict[str, object]:
    return {
        "time_s": time_s,
        "runner_up": None if runner_time_s is None else "ring/LL128",
        "runner_up_time_s": runner_time_s,
    }


def test_a_slower_runner_up_shows_how_much_slower() -> None:
    assert _next(_choice(100e-6, 112e-6)) == "ring/LL128 +12%"


def test_a_faster_runner_up_shows_a_minus_sign_not_plus_minus() -> None:
    assert _next(_choice(100e-6, 95e-6)) == "ring/LL128 -5%"


def test_no_runner_up_is_a_dash() -> None:
    assert _next(_choice(100e-6, None)) == "-"
