"""Parse and format the units genie speaks: bytes, bandwidths, durations, ratios, size sweeps.

Inside genie sizes are bytes, times seconds and bandwidths bytes/s. GB means 10^9 bytes and
GiB 2^30 bytes; output always names which one it uses. One parser per quantity serves the CLI
and the testbed files alike: a bandwidth must carry its unit (``B`` bytes, ``b``/``bit`` bits),
a bare size is bytes, a bare duration seconds, a ratio is ``2:1`` or ``2``.
"""

from __future__ import annotations

import math
import re

from genie.errors import UnitError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0}

_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*"


def parse_size(text: str | int) -> int:
    """Parse a byte count such as ``64MiB``, ``1GB`` or ``4096`` into bytes."""
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"size must not be negative: {text}")
        return text
    m = re.fullmatch(_NUM, text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise UnitError(f"not a size: {text!r} (use e.g. 4096, 64KiB, 1MiB, 1GB)")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value != int(value):
        raise UnitError(f"size is not a whole number of bytes: {text!r}")
    return int(value)


_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_PREFIX.update({"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40})

#: The bandwidth spellings genie accepts, for error messages.
BANDWIDTH_FORMS = (
    "bytes: 50GiB/s (50 x 2^30 B/s, ASTRA-sim's 'GB/s'), 50GB/s (50 x 10^9 B/s), 12.5GBps; "
    "bits: 100Gb/s, 100gbit, 100gbps, 800mbit"
)
MAX_BANDWIDTH = 1e15  # bytes/s (8 Pbit/s): anything faster is a typo


def parse_bandwidth(text: str) -> float:
    """Parse a bandwidth with its unit into bytes/s; a bare number is an error.

    ``B`` is bytes and ``b`` bits: ``50GiB/s`` (2^30 B/s), ``50GB/s`` and ``12.5GBps``
    (10^9 B/s); ``100Gb/s``, ``100gbit``, ``100gbps`` (bits/s). ASTRA-sim's "GB/s" is GiB/s here.
    """
    if not isinstance(text, str) or isinstance(text, bool):
        raise UnitError(f"bandwidth {text!r} needs a unit, e.g. {BANDWIDTH_FORMS}")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*", text)
    if not m:
        raise UnitError(f"not a bandwidth: {text!r} (use {BANDWIDTH_FORMS})")
    number, unit = m.group(1), m.group(2)
    if not unit:
        raise UnitError(f"bandwidth {text!r} needs a unit, e.g. {BANDWIDTH_FORMS}")
    u = re.fullmatch(r"([kKmMgGtT]i?|)(B/s|Bps|b/s|bps|bit/s|bit|Bit/s|Bit)", unit)
    if not u:
        low = unit.lower()  # 10Gbit, 10GBIT: "bit" in any case means bits
        u = re.fullmatch(r"([kmgt]i?|)(bit/s|bit|bps)", low)
        if not u or unit.endswith("Bps"):
            raise UnitError(f"not a bandwidth: {text!r} (use {BANDWIDTH_FORMS})")
    prefix, kind = u.group(1).lower(), u.group(2)
    bits = kind.lower().startswith("bit") or kind in ("b/s", "bps")
    value = float(number) * _PREFIX[prefix] / (8 if bits else 1)
    if not (0 < value <= MAX_BANDWIDTH):
        raise UnitError(
            f"bandwidth must be positive and at most {MAX_BANDWIDTH / 1e12:g} TB/s: {text!r}"
        )
    return value


def format_bandwidth(bytes_per_s: float) -> str:
    """Format bytes/s as GB/s (10^9 B/s) and Gbit/s, e.g. ``12.500 GB/s (100 Gbit/s)``."""
    return f"{bytes_per_s / 1e9:.3f} GB/s ({bytes_per_s * 8 / 1e9:g} Gbit/s)"


def parse_ratio(text: str | int | float) -> float:
    """Parse an oversubscription ratio: ``2:1``, ``3:2``, ``2`` or a number; positive, finite."""
    if isinstance(text, bool):
        raise UnitError(f"not a ratio: {text!r} (use 2:1 or 2)")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?::\s*([0-9]*\.?[0-9]+)\s*)?", text)
        if not m:
            raise UnitError(f"not a ratio: {text!r} (use 2:1 or 2)")
        den = float(m.group(2)) if m.group(2) else 1.0
        if den == 0:
            raise UnitError(f"not a ratio: {text!r} (the second number is 0)")
        value = float(m.group(1)) / den
    if not (math.isfinite(value) and 0 < value <= 1e6):
        raise UnitError(f"ratio must be positive and finite: {text!r}")
    return value


def parse_fraction(text: str | int | float) -> float:
    """Parse a fraction such as ``0.1%`` or ``0.001`` (a bare number is the fraction itself)."""
    if isinstance(text, bool):
        raise UnitError(f"not a fraction: {text!r} (use 0.1% or 0.001)")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*", text)
        if not m:
            raise UnitError(f"not a fraction: {text!r} (use 0.1% or 0.001)")
        value = float(m.group(1)) / (100 if m.group(2) else 1)
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise UnitError(f"a fraction is from 0 to 1 (0% to 100%): {text!r}")
    return value


def parse_duration(text: str | int | float) -> float:
    """Parse a duration such as ``500ns``, ``2ms`` or ``1.5`` (seconds) into seconds."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(_NUM, text)
        if not m or m.group(2).lower() not in _TIME_UNITS:
            raise UnitError(f"not a duration: {text!r} (use e.g. 500ns, 2us, 1.5ms, 3s)")
        value = float(m.group(1)) * _TIME_UNITS[m.group(2).lower()]
    if not (math.isfinite(value) and value >= 0):
        raise UnitError(f"duration must be finite and not negative: {text!r}")
    return value


MAX_SWEEP_POINTS = 10_000


def parse_size_sweep(text: str, max_points: int = MAX_SWEEP_POINTS) -> list[int]:
    """Parse ``MIN:MAX:xF`` (geometric, factor F) or ``MIN:MAX:+STEP`` or ``A,B,C`` into sizes.

    The number of points is computed before the list is built; more than ``max_points`` is an
    error, so a sweep like ``1:1TiB:+1`` is refused at once.
    """
    if "," in text:
        parts = [part for part in text.split(",") if part.strip()]
        if len(parts) > max_points:
            raise UnitError(f"size list has {len(parts)} sizes; at most {max_points}")
        return [parse_size(part) for part in parts]
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0])]
    if len(parts) != 3:
        raise UnitError(f"not a size sweep: {text!r} (use MIN:MAX:xFACTOR, MIN:MAX:+STEP or A,B)")
    lo, hi, step = parse_size(parts[0]), parse_size(parts[1]), parts[2].strip()
    if lo <= 0 or hi < lo:
        raise UnitError(f"size sweep needs 0 < MIN <= MAX: {text!r}")
    if step.startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError as exc:
            raise UnitError(f"bad sweep factor in {text!r}") from exc
        if not (math.isfinite(factor) and factor > 1):
            raise UnitError(f"sweep factor must be a finite number > 1: {text!r}")
        points = math.floor(math.log(hi * (1 + 1e-9) / lo) / math.log(factor)) + 1
        if points > max_points:
            raise UnitError(f"size sweep {text!r} has {points} points; at most {max_points}")
        sizes: list[int] = []
        s = float(lo)
        while s <= hi * (1 + 1e-9):
            sizes.append(round(s))
            s *= factor
        return sizes
    if step.startswith("+"):
        inc = parse_size(step[1:])
        if inc <= 0:
            raise UnitError(f"sweep step must be > 0: {text!r}")
        points = (hi - lo) // inc + 1
        if points > max_points:
            raise UnitError(f"size sweep {text!r} has {points} points; at most {max_points}")
        return list(range(lo, hi + 1, inc))
    raise UnitError(f"sweep step must start with x or +: {text!r}")


def format_bytes(n: float) -> str:
    """Format a byte count with binary units (KiB, MiB, GiB), e.g. ``64.0 MiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_seconds(t: float) -> str:
    """Format a duration with a fitting unit (ns, us, ms, s); never a negative zero."""
    if abs(t) < 0.5e-9:
        t = 0.0
    a = abs(t)
    if a >= 1:
        return f"{t:.3f} s"
    if a >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    if a >= 1e-6:
        return f"{t * 1e6:.2f} us"
    return f"{t * 1e9:.0f} ns"


def gb_per_s(bytes_per_s: float) -> float:
    """Convert bytes/s to GB/s (10^9 bytes per second), as nccl-tests prints."""
    return bytes_per_s / 1e9
