"""A sweep's grid, planned purely: keys, their values, every point and its command line.

``--grid KEY=V1,V2`` names an option of ``genie simulate`` (``KEYS``: the fabric, the
algorithms, placement, calibration, stream concurrency, stragglers) and the values it takes; the
grid is every combination, in the order the keys were given (the last key varies fastest).
``--set KEY=VALUE`` fixes an option for every point. Values are passed to simulate's own parser,
so each is checked as simulate checks it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from genie.errors import UsageError

#: grid key -> the simulate option it sets
KEYS = {
    "topology": "--topology",
    "bandwidth": "--bandwidth",
    "latency": "--latency",
    "oversubscription": "--oversubscription",
    "spines": "--spines",
    "leaves": "--leaves",
    "routing": "--routing",
    "algorithm": "--algorithm",
    "chunks": "--chunks",
    "placement": "--placement",
    "ranks-per-host": "--ranks-per-host",
    "intra-bandwidth": "--intra-bandwidth",
    "calibration": "--calibration",
    "comm-concurrency": "--comm-concurrency",
    "pricer": "--pricer",
    "testbed": "--testbed",
    "straggler": "--straggler",
    "jitter": "--jitter",
    "seed": "--seed",
}
MAX_VALUES = 100
MAX_POINTS = 10_000


def _key(text: str) -> str:
    k = text.strip().replace("_", "-")
    if k not in KEYS:
        raise UsageError(f"unknown sweep key {text!r}; known: {', '.join(KEYS)}")
    return k


@dataclass(frozen=True)
class Grid:
    """The keys and values of a sweep, and the options fixed for every point."""

    axes: tuple[tuple[str, tuple[str, ...]], ...]
    fixed: tuple[tuple[str, str], ...] = ()

    @property
    def keys(self) -> list[str]:
        """The swept keys, in order."""
        return [k for k, _ in self.axes]

    def points(self) -> list[dict[str, str]]:
        """Every combination of values (the last key varies fastest)."""
        return [
            dict(zip(self.keys, combo, strict=True))
            for combo in itertools.product(*(v for _, v in self.axes))
        ]

    def argv(self, prefix: str, point: dict[str, str]) -> list[str]:
        """The ``genie simulate`` arguments of one point."""
        out = [prefix]
        for k, v in [*self.fixed, *point.items()]:
            out += [KEYS[k], v]
        return out


def parse_grid(grid: Sequence[str], fixed: Sequence[str] = ()) -> Grid:
    """``KEY=V1,V2`` items (and ``KEY=VALUE`` fixed ones) into a Grid (checked, bounded)."""
    if not grid:
        raise UsageError("give at least one --grid KEY=V1,V2")
    axes: list[tuple[str, tuple[str, ...]]] = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep:
            raise UsageError(f"--grid {item!r}: use KEY=V1,V2 (e.g. bandwidth=100gbit,400gbit)")
        k = _key(key)
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not vals or len(set(vals)) != len(vals) or len(vals) > MAX_VALUES:
            raise UsageError(f"--grid {item!r}: 1..{MAX_VALUES} distinct values")
        if k in dict(axes):
            raise UsageError(f"--grid: key {k!r} given twice")
        if k == "algorithm" and any("=" in v for v in vals):
            raise UsageError("--grid algorithm=...: one algorithm name per value (ring,direct)")
        axes.append((k, vals))
    n = 1
    for _, v in axes:
        n *= len(v)
    if n > MAX_POINTS:
        raise UsageError(f"the grid has {n} points, more than {MAX_POINTS}")
    pinned: list[tuple[str, str]] = []
    for item in fixed:
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise UsageError(f"--set {item!r}: use KEY=VALUE")
        k = _key(key)
        if k in dict(axes):
            raise UsageError(f"--set {k}: the key is swept by --grid too")
        pinned.append((k, value.strip()))
    return Grid(tuple(axes), tuple(pinned))


def label(point: dict[str, str], keys: Sequence[str] | None = None) -> str:
    """``topology leaf_spine, bandwidth 100gbit`` (the keys given, or all)."""
    ks = list(point) if keys is None else list(keys)
    return ", ".join(f"{k} {point[k]}" for k in ks)
