"""How far the model is from the wire: measured vs nominal vs calibrated, in percent.

``ErrorRow`` is one measured quantity (a collective at a size, or an iteration) beside the
nominal model (the testbed as declared) and the calibrated model (None when no calibration
priced it); ``error_pct`` is (model - measured) / measured in percent, so +20 % means the model
is 20 % slow. ``mape`` averages |error| over rows. ``error_strip`` draws both errors of a row on
a -100 % .. +100 % axis in text (n = nominal, c = calibrated, * = both), the small plot every
text report carries.

MAPE weighs a 5 us broadcast like a 50 ms all-reduce, so one tiny operation can rule it.
``weighted_error`` weighs each row by its share of the measured time (sum |model - measured|
/ sum measured, in percent: the error of the time the rows add up to), and ``split_by_share``
sets apart the rows below ``MINOR_SHARE`` (1 %) of that time, to be reported apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

STRIP_HALF = 10  # characters from 0 % to 100 % on the strip
MINOR_SHARE = 0.01  # rows below this share of the measured time are reported apart


def error_pct(model: float | None, measured: float | None) -> float | None:
    """(model - measured) / measured in percent; None when either is missing or measured <= 0."""
    if model is None or measured is None or not measured > 0:
        return None
    return (model - measured) / measured * 100.0


def mape(errors: Iterable[float | None]) -> float | None:
    """Mean absolute percentage error over the known errors (None when there are none)."""
    known = [abs(e) for e in errors if e is not None]
    return sum(known) / len(known) if known else None


def weighted_error(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """Time-weighted error in percent over (model, measured) pairs: sum |model - measured| /
    sum measured (each pair weighted by its share of the measured time); None without pairs."""
    known = [(m, t) for m, t in pairs if m is not None and t > 0]
    total = sum(t for _, t in known)
    return sum(abs(m - t) for m, t in known) / total * 100.0 if total > 0 else None


def split_by_share(
    measured: Sequence[float], threshold: float = MINOR_SHARE
) -> tuple[list[int], list[int]]:
    """Indices of the rows at or above ``threshold`` of the total measured time, and below."""
    total = sum(t for t in measured if t > 0)
    major = [i for i, t in enumerate(measured) if total > 0 and t >= threshold * total]
    kept = set(major)
    return major, [i for i in range(len(measured)) if i not in kept]


@dataclass
class ErrorRow:
    """One measured number beside the nominal and the calibrated model of it (seconds)."""

    label: str
    size: int | None
    measured_s: float
    nominal_s: float | None
    calibrated_s: float | None = None

    @property
    def nominal_err(self) -> float | None:
        """Nominal model's error in percent."""
        return error_pct(self.nominal_s, self.measured_s)

    @property
    def calibrated_err(self) -> float | None:
        """Calibrated model's error in percent."""
        return error_pct(self.calibrated_s, self.measured_s)

    def to_dict(self) -> dict:
        """JSON-ready (seconds, percent)."""
        return {
            "label": self.label,
            "size": self.size,
            "measured_s": self.measured_s,
            "nominal_s": self.nominal_s,
            "nominal_error_pct": self.nominal_err,
            "calibrated_s": self.calibrated_s,
            "calibrated_error_pct": self.calibrated_err,
        }


def summary(rows: Iterable[ErrorRow]) -> dict[str, float | None]:
    """MAPE of the nominal and of the calibrated model over ``rows`` (percent)."""
    rows = list(rows)
    return {
        "nominal_mape_pct": mape(r.nominal_err for r in rows),
        "calibrated_mape_pct": mape(r.calibrated_err for r in rows),
    }


def error_strip(nominal: float | None, calibrated: float | None) -> str:
    """Both errors on a text axis from -100 % to +100 % ('|' at 0; '<' / '>' beyond)."""
    cells = ["·"] * (2 * STRIP_HALF + 1)
    cells[STRIP_HALF] = "|"

    def place(err: float | None) -> int | None:
        if err is None:
            return None
        return STRIP_HALF + max(-STRIP_HALF, min(STRIP_HALF, round(err / 100 * STRIP_HALF)))

    n, c = place(nominal), place(calibrated)
    for pos, mark in ((n, "n"), (c, "c")):
        if pos is not None:
            cells[pos] = "*" if pos == n == c else mark
    left = "<" if (nominal or 0) < -100 or (calibrated or 0) < -100 else " "
    right = ">" if (nominal or 0) > 100 or (calibrated or 0) > 100 else " "
    return left + "".join(cells) + right
