"""The textbook closed form beside a simulated collective: the network it assumes, its value.

``ClosedForm`` is the network a closed form describes (one route's bandwidth and latency per
message, the algorithms the pricer used, chunks); ``closed_for`` prices one report row with it
(``genie.vocabulary.closed_form``) where that is meaningful: even collectives, one chunk.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from genie.collectives.registry import DEFAULT_ALGORITHM
from genie.errors import CollectiveError
from genie.vocabulary import canonical_collective, closed_form, formula


class ClosedForm(msgspec.Struct, frozen=True):
    """The network the closed forms assume: bytes/s and seconds per message on one route."""

    bandwidth: float
    latency: float
    algorithms: dict[str, str] | None  # None: the built-in traffic model priced (no programs)
    chunks: int = 1

    def algorithm(self, coll: str) -> str | None:
        """The algorithm the pricer used for ``coll`` (None: the built-in traffic model's)."""
        if self.algorithms is None:
            return None
        try:
            planned = canonical_collective(coll)
        except CollectiveError:
            return None  # no step program: the pricer fell back to the traffic model
        return self.algorithms.get(planned) or DEFAULT_ALGORITHM[planned]

    def formula(self, coll: str) -> str:
        """``FORMULA = `` for ``coll``'s closed form, or ``""``."""
        text = formula(coll, self.algorithm(coll))
        return f"{text} = " if text else ""


def closed_for(row: Mapping[str, object], closed: ClosedForm | None) -> float | None:
    """The closed form of a report row (``collective``, ``ranks``, ``size``) or None."""
    if closed is None or row["collective"] == "send_recv" or closed.chunks != 1:
        return None
    if row.get("uneven") is not None:  # the closed forms are for even collectives
        return None
    coll, n, size = str(row["collective"]), row["ranks"], row["size"]
    if not isinstance(n, int) or not isinstance(size, int):
        return None
    try:
        return closed_form(coll, closed.algorithm(coll), n, size, closed.bandwidth, closed.latency)
    except CollectiveError:
        return None


def with_closed(d: dict[str, object], closed: ClosedForm | None) -> dict[str, object]:
    """A report dict with ``closed_form_s`` on every collective row.

    ``closed_for`` reads only a row's collective, ranks, size and whether it is uneven: rows
    alike in those (most of thousands of rows) are priced once.
    """
    rows = d["collectives"]
    assert isinstance(rows, list)
    memo: dict[tuple[object, ...], float | None] = {}
    for row in rows:
        n, size = row["ranks"], row["size"]
        key = (row["collective"], n, size, type(n), type(size), row.get("uneven") is None)
        if key in memo:
            value = memo[key]
        else:
            value = memo[key] = closed_for(row, closed)
        row["closed_form_s"] = value
    return d
