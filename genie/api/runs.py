"""``compare_runs``: two stored runs side by side, as ``genie runs compare A B``.

Only collectives (collective, algorithm, ranks) both runs measured are compared; per size the
p50 of each run's measured iterations (warm-up left out), B/A and B vs A in percent; a size only
one run measured gets a row with the other side None. ``RunComparison.to_dict()`` is the
document ``genie runs compare --json`` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from genie.errors import StoreError
from genie.store import DEFAULT_STORE, RunInfo, RunStore
from genie.wire.conditions import conditions_of, differences

JsonDoc = dict[str, object]
Key = tuple[str, str, int, int]  # collective, algorithm, ranks, size


@dataclass(frozen=True)
class ComparedSize:
    """One size of one collective: each run's p50 (None: not measured by it) and the ratio."""

    collective: str
    algorithm: str
    n_ranks: int
    size: int
    a_p50_s: float | None
    b_p50_s: float | None
    b_over_a: float | None
    b_vs_a_pct: float | None


@dataclass
class RunComparison:
    """Two runs and their measured p50s side by side (``to_dict()``: the CLI's --json)."""

    a: RunInfo
    b: RunInfo
    rows: list[ComparedSize]
    # per size or iteration both runs have counters for: each headline counter per iteration,
    # summed over agents (``genie.report.counters.compare_counters``); [] when either has none
    counters: list[dict[str, object]] = dataclasses.field(default_factory=list)

    def conditions_differ(self) -> list[str]:
        """The recorded conditions the two runs do not share, one phrase each."""
        return differences(conditions_of(self.a.meta), conditions_of(self.b.meta))

    def to_dict(self) -> JsonDoc:
        """The ``genie runs compare --json`` document (seconds)."""
        return {
            "a": self.a.run_id,
            "b": self.b.run_id,
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "conditions_differ": differences(
                conditions_of(self.a.meta), conditions_of(self.b.meta)
            ),
            **({"counters": self.counters} if self.counters else {}),
        }


def open_store(store: str | Path) -> RunStore:
    """The run store at ``store`` (a StoreError when there is none: nothing is created)."""
    if not Path(store).exists():
        raise StoreError(f"no run store at {store} (runs are recorded by genie bench)")
    return RunStore(store)


def times_by_key(st: RunStore, run_id: str) -> dict[Key, list[float]]:
    """Measured times (warm-up left out) per (collective, algorithm, ranks, size) of a run."""
    out: dict[Key, list[float]] = {}
    for x in st.instances(run_id):
        key = (str(x["collective"]), str(x["algorithm"]), int(x["n_ranks"]), int(x["size"]))
        out.setdefault(key, []).append(float(x["time_s"]))
    return out


def compare_rows(
    a: Mapping[Key, Sequence[float]], b: Mapping[Key, Sequence[float]]
) -> list[ComparedSize]:
    """Side-by-side rows of two runs' time lists per key (see the module docstring)."""
    from genie.controller.results import stats  # numpy: not for `genie runs list`

    both = {k[:3] for k in a} & {k[:3] for k in b}
    rows = []
    for key in sorted(k for k in set(a) | set(b) if k[:3] in both):
        pa = stats(a[key]).p50 if key in a else None
        pb = stats(b[key]).p50 if key in b else None
        ratio = pb / pa if pa and pb else None
        rows.append(
            ComparedSize(
                collective=key[0],
                algorithm=key[1],
                n_ranks=key[2],
                size=key[3],
                a_p50_s=pa,
                b_p50_s=pb,
                b_over_a=ratio,
                b_vs_a_pct=None if ratio is None else (ratio - 1) * 100,
            )
        )
    return rows


def compare_runs(a: str, b: str, *, store: str | Path = DEFAULT_STORE) -> RunComparison:
    """Runs ``a`` and ``b`` (ids or unique prefixes) of ``store`` side by side."""
    with open_store(store) as st:
        ra, rb = st.run(a), st.run(b)
        ta, tb = times_by_key(st, ra.run_id), times_by_key(st, rb.run_id)
        ca, cb = st.counters(ra.run_id), st.counters(rb.run_id)
    rows = compare_rows(ta, tb)
    if not rows:
        have_a = sorted({f"{c}/{al} n={n}" for c, al, n, _ in ta}) or ["nothing"]
        have_b = sorted({f"{c}/{al} n={n}" for c, al, n, _ in tb}) or ["nothing"]
        raise StoreError(
            f"runs {ra.run_id} ({', '.join(have_a)}) and {rb.run_id} ({', '.join(have_b)}) "
            "measured no collective in common"
        )
    counters: list[dict[str, object]] = []
    if ca and cb:
        from genie.report.counters import compare_counters, group_counters

        counters = compare_counters(group_counters(ca), group_counters(cb))
    return RunComparison(ra, rb, rows, counters)
