"""Parse and format the units genie speaks: bytes, bit rates, durations and size sweeps.

Inside genie sizes are bytes, times seconds and bandwidths bytes/s. GB means 10^9 bytes and
GiB 2^30 bytes; output always names which one it uses.
"""

from __future__ import annotations

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

_RATE_UNITS = {  # to bit/s
    "": 1,
    "bit": 1,
    "bps": 1,
    "kbit": 1e3,
    "kbps": 1e3,
    "mbit": 1e6,
    "mbps": 1e6,
    "gbit": 1e9,
    "gbps": 1e9,
    "tbit": 1e12,
    "tbps": 1e12,
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


def parse_rate(text: str | int | float) -> float:
    """Parse a link rate such as ``10gbit`` or ``1e9`` (bit/s) into bytes/s."""
    if isinstance(text, int | float):
        bits = float(text)
    else:
        m = re.fullmatch(_NUM, text)
        if not m or m.group(2).lower() not in _RATE_UNITS:
            raise UnitError(f"not a rate: {text!r} (use e.g. 1gbit, 100mbit, 25e9)")
        bits = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    if bits <= 0:
        raise UnitError(f"rate must be positive: {text!r}")
    return bits / 8.0


_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_PREFIX.update({"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40})


def parse_bandwidth(text: str | float) -> float:
    """Parse ``50GiB/s`` (2^30 B/s), ``50GB/s`` (10^9 B/s), ``100Gb/s`` or ``400gbit`` into B/s.

    ``B`` is bytes and ``b`` bits; ASTRA-sim's "GB/s" is 2^30 B/s, which is ``GiB/s`` here.
    """
    if isinstance(text, int | float):
        if text <= 0:
            raise UnitError(f"bandwidth must be positive: {text}")
        return float(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)[bB]/s\s*", text)
    if m:
        prefix, letter = m.group(2).lower(), text.strip()[-3]
        if prefix not in _PREFIX:
            raise UnitError(
                f"not a bandwidth: {text!r} (bytes: 50GiB/s = 50*2^30 B/s, 50GB/s = 50e9 B/s; "
                "bits: 100Gb/s, 400gbit)"
            )
        value = float(m.group(1)) * _PREFIX[prefix] / (8 if letter == "b" else 1)
        if value <= 0:
            raise UnitError(f"bandwidth must be positive: {text!r}")
        return value
    return parse_rate(text)


def parse_duration(text: str | int | float) -> float:
    """Parse a duration such as ``500ns``, ``2ms`` or ``1.5`` (seconds) into seconds."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(_NUM, text)
        if not m or m.group(2).lower() not in _TIME_UNITS:
            raise UnitError(f"not a duration: {text!r} (use e.g. 500ns, 2us, 1.5ms, 3s)")
        value = float(m.group(1)) * _TIME_UNITS[m.group(2).lower()]
    if value < 0:
        raise UnitError(f"duration must not be negative: {text!r}")
    return value


def parse_size_sweep(text: str) -> list[int]:
    """Parse ``MIN:MAX:xF`` (geometric, factor F) or ``MIN:MAX:+STEP`` or ``A,B,C`` into sizes."""
    if "," in text:
        return [parse_size(part) for part in text.split(",") if part.strip()]
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0])]
    if len(parts) != 3:
        raise UnitError(f"not a size sweep: {text!r} (use MIN:MAX:xFACTOR, MIN:MAX:+STEP or A,B)")
    lo, hi, step = parse_size(parts[0]), parse_size(parts[1]), parts[2].strip()
    if lo <= 0 or hi < lo:
        raise UnitError(f"size sweep needs 0 < MIN <= MAX: {text!r}")
    sizes: list[int] = []
    if step.startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError as exc:
            raise UnitError(f"bad sweep factor in {text!r}") from exc
        if factor <= 1:
            raise UnitError(f"sweep factor must be > 1: {text!r}")
        s = float(lo)
        while s <= hi * (1 + 1e-9):
            sizes.append(round(s))
            s *= factor
    elif step.startswith("+"):
        inc = parse_size(step[1:])
        if inc <= 0:
            raise UnitError(f"sweep step must be > 0: {text!r}")
        sizes = list(range(lo, hi + 1, inc))
    else:
        raise UnitError(f"sweep step must start with x or +: {text!r}")
    if len(sizes) > 10_000:
        raise UnitError(f"size sweep has {len(sizes)} points; at most 10000")
    return sizes


def format_bytes(n: float) -> str:
    """Format a byte count with binary units (KiB, MiB, GiB), e.g. ``64.0 MiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_seconds(t: float) -> str:
    """Format a duration with a fitting unit (ns, us, ms, s)."""
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
