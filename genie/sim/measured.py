"""The ``measured`` backend: collective times from a ``genie bench`` run, interpolated.

A ``MeasuredTable`` holds, per (collective, number of ranks), measured sizes and times (the
median over repetitions). Sizes are whole buffers as ``genie bench`` stores them (nccl-tests'
size), so a trace's all-gather, whose comm_size is the per-rank shard, is looked up at
n x comm_size. A size between two measured sizes is priced by linear interpolation
in log(size)-log(time). Outside the measured sizes, or for a (collective, ranks) never measured,
the analytical model is used, scaled at the nearest measured size so the curve is continuous;
every such use is counted and reported as extrapolated, with its reason (which collective and
rank count, below or above which measured size, never measured at that rank count) and how it
was priced (the model scaled by how much, the raw model, or the measured curve's slope). This
backend does not model sharing:
each instance takes its measured time even when others are in flight (said in its notes).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from genie.errors import StoreError
from genie.sim.network import FixedTimeBackend, Pricer, Transfer
from genie.units import format_bytes
from genie.vocabulary import chakra_name

SHOWN_REASONS = 6  # extrapolation reasons listed in the summary (the rest are counted)


class MeasuredTable:
    """Measured (size, time) points per (collective, ranks); see the module docstring."""

    def __init__(self, rows: Iterable[tuple[str, int, int, float]], source: str = "") -> None:
        pts: dict[tuple[str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for coll, n, size, t in rows:
            if size > 0 and t > 0:
                pts[(coll, int(n))][int(size)].append(float(t))
        self.source = source
        self.curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        for key, by_size in pts.items():
            sizes = np.array(sorted(by_size), dtype=np.float64)
            times = np.array([float(np.median(by_size[int(s)])) for s in sizes])
            self.curves[key] = (sizes, times)

    def __len__(self) -> int:
        return sum(len(s) for s, _ in self.curves.values())

    def lookup(self, collective: str, n: int, size: int) -> tuple[float | None, str]:
        """(time, how): how is 'measured', 'interpolated', 'below', 'above' or 'missing'."""
        curve = self.curves.get((collective, n))
        if curve is None:
            return None, "missing"
        sizes, times = curve
        if size <= 0:
            return float(times[0]), "below"
        exact = np.flatnonzero(sizes == size)
        if len(exact):
            return float(times[exact[0]]), "measured"
        if size < sizes[0]:
            return float(times[0]), "below"
        if size > sizes[-1]:
            return float(times[-1]), "above"
        t = np.exp(np.interp(np.log(size), np.log(sizes), np.log(times)))
        return float(t), "interpolated"

    def nearest_size(self, collective: str, n: int, size: int) -> int:
        """The measured size closest to ``size`` in log scale (for scaling the model)."""
        sizes, _ = self.curves[(collective, n)]
        return int(sizes[0] if size < sizes[0] else sizes[-1])

    @classmethod
    def from_json(cls, path: str | Path) -> MeasuredTable:
        """Rows from a JSON list of {collective, n_ranks, size, time_s} (or a bench --json)."""
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read measured times from {p}: {exc}") from exc
        items: Any = doc.get("results", doc.get("rows", [])) if isinstance(doc, dict) else doc
        rows = []
        for it in items:
            try:
                t = it.get("time_s", it.get("time_p50_s", it.get("p50_s")))
                n = it.get("n_ranks", it.get("ranks"))
                rows.append((str(it["collective"]), int(n), int(it["size"]), float(t)))
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreError(f"{p}: bad measured row {it!r}: {exc}") from exc
        if not rows:
            raise StoreError(f"{p}: no measured collective times in it")
        return cls(rows, source=str(p))

    @classmethod
    def from_instances(
        cls,
        rows: Iterable[dict],
        source: str,
        algorithms: dict[str, str] | None = None,
    ) -> MeasuredTable:
        """A table from a bench run's stored instances (dicts: collective, algorithm, n_ranks,
        size, time_s; warm-up already left out).

        With ``algorithms``, a collective's rows are only those of its chosen algorithm;
        otherwise a run that measured several algorithms of one collective is an error (their
        times would be mixed).
        """
        by_coll: dict[str, set[str]] = defaultdict(set)
        out = []
        for row in rows:
            coll, algo = str(row["collective"]), str(row["algorithm"])
            want = (algorithms or {}).get(coll)
            if want and want != algo:
                continue
            by_coll[coll].add(algo)
            out.append((coll, int(row["n_ranks"]), int(row["size"]), float(row["time_s"])))
        mixed = {c: sorted(a) for c, a in by_coll.items() if len(a) > 1}
        if mixed:
            raise StoreError(
                f"{source} measured several algorithms {mixed}; choose with --algorithm"
            )
        if not out:
            raise StoreError(f"{source} has no measured collective instances")
        return cls(out, source=source)


Fallback = Callable[[Transfer], float]


class MeasuredBackend(FixedTimeBackend):
    """Each instance takes its measured (interpolated) time when alone on the network.

    With a ``pricer`` (the analytical model's links), instances in flight together share links
    as the analytical backend shares them, each scaled to its measured standalone time
    (``CalibratedPricer``); without one, they do not slow each other.
    """

    def __init__(
        self,
        table: MeasuredTable,
        model: Fallback | None = None,
        name: str = "",
        pricer: Pricer | None = None,
    ) -> None:
        self.table = table
        self.model = model
        self.counts: dict[str, int] = defaultdict(int)
        self.reasons: dict[str, int] = defaultdict(int)  # why and how, per extrapolation
        super().__init__(name or f"measured:{table.source}", pricer)
        if pricer is not None:
            self.notes = [
                "measured backend: standalone times measured; instances in flight together "
                "share links as the analytical model says"
            ]
        else:
            self.notes = ["measured backend: instances in flight together do not slow each other"]

    def price(self, tr: Transfer) -> float:
        """Time of one transfer from the table, else the scaled or raw model."""
        coll = chakra_name(tr.comm_type)
        n = len(tr.ranks)
        size = tr.size * n if coll == "all_gather" else tr.size
        t, how = self.table.lookup(coll, n, size)
        if t is not None and how in ("measured", "interpolated"):
            self.counts[how] += 1
            return float(t)
        self.counts["extrapolated"] += 1
        why = self._why(coll, n, size, how)
        if self.model is None:
            if t is None:
                raise StoreError(
                    f"no measured times for {coll} on {n} ranks in {self.table.source} and no "
                    "model to extrapolate with"
                )
            sizes, times = self.table.curves[(coll, n)]
            if len(sizes) >= 2:
                i = (0, 1) if how == "below" else (-2, -1)
                slope = (math.log(times[i[1]]) - math.log(times[i[0]])) / (
                    math.log(sizes[i[1]]) - math.log(sizes[i[0]])
                )
                ref = sizes[i[0]] if how == "below" else sizes[i[1]]
                tref = times[i[0]] if how == "below" else times[i[1]]
                self.reasons[f"{why}: the measured curve's log-log slope ({slope:.2f})"] += 1
                return float(tref * (max(size, 1) / ref) ** slope)
            self.reasons[f"{why}: proportional to size from the one measured size"] += 1
            return float(t * max(size, 1) / sizes[0])
        modeled = self.model(tr)
        if t is None:
            self.reasons[f"{why}: the analytical model, unscaled"] += 1
            return modeled
        ref = self.table.nearest_size(coll, n, size)
        ref_tr = ref // n if coll == "all_gather" else ref
        ref_model = self.model(Transfer(tr.iid, tr.comm_type, ref_tr, tr.ranks, tr.group))
        if not ref_model > 0:
            self.reasons[f"{why}: the analytical model, unscaled (it prices 0 there)"] += 1
            return modeled
        self.reasons[
            f"{why}: the analytical model x {t / ref_model:.3g} (measured/model at "
            f"{format_bytes(ref)})"
        ] += 1
        return modeled * (t / ref_model)

    def _why(self, coll: str, n: int, size: int, how: str) -> str:
        """Why a transfer is outside the table, in words."""
        if how == "missing":
            have = sorted(k for c, k in self.table.curves if c == coll)
            other = (
                f"it has {coll} on {', '.join(map(str, have))} ranks"
                if have
                else f"it has no {coll} at all"
            )
            return f"{coll} on {n} ranks: never measured in {self.table.source} ({other})"
        sizes, _ = self.table.curves[(coll, n)]
        if how == "below":
            edge = f"below the smallest measured size {format_bytes(sizes[0])}"
        else:
            edge = f"above the largest measured size {format_bytes(sizes[-1])}"
        return f"{coll} on {n} ranks at {format_bytes(size)}: {edge}"

    def duration(self, transfer: Transfer) -> float:
        """The instance's measured (or model-scaled) time alone."""
        return self.price(transfer)

    def summary(self) -> str:
        """How many instances were measured, interpolated or extrapolated, and why and how."""
        c = self.counts
        text = (
            f"{c['measured']} at measured sizes, {c['interpolated']} interpolated (log-log), "
            f"{c['extrapolated']} EXTRAPOLATED outside measured sizes"
        )
        if not self.reasons:
            return text
        ranked = sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = [f"{k} x {why}" for why, k in ranked[:SHOWN_REASONS]]
        if len(ranked) > SHOWN_REASONS:
            rest = sum(k for _, k in ranked[SHOWN_REASONS:])
            parts.append(f"{rest} more for {len(ranked) - SHOWN_REASONS} other reasons")
        return f"{text}: " + "; ".join(parts)
