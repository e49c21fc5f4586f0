"""Stored calibrations: the one ``genie calibrate`` stored by id, or the newest offered one.

``resolve("none" | "latest" | ID, store, testbed)`` is the calibration a run prices with (None:
the nominal model only). Nothing is applied silently: the commands default to ``none``, and
``genie.calibration.model.nominal_reason`` says in one line why a report priced nominally.
``latest`` picks the newest calibration of the testbed that is ``offered`` (no physical bound
binds and its held-back error beat nominal by a clear margin: ``genie.calibration.fit``) and,
given the nominal ``topology``, fitted on that same fabric; without a store or such a
calibration it is simply none. An explicit id that is not in the store, or one that is not
offered, is an error in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from genie.calibration.model import Calibration, check_fabric, identity, mismatch
from genie.errors import CalibrationError, StoreError

if TYPE_CHECKING:  # the store (sqlite) loads only when a calibration is asked for
    from genie.store import RunStore


def load(store: RunStore, cal_id: str) -> Calibration:
    """A stored calibration by id (a unique prefix works)."""
    return msgspec.convert(store.calibration(cal_id), Calibration)


def resolve(
    spec: str | None,
    store_path: str | Path | None,
    testbed_name: str | None,
    topology: Any = None,
) -> Calibration | None:
    """The calibration ``spec`` names (``none``/None: price nominally only; see the module).

    ``topology``: the nominal Topology it is to price (``latest`` then skips calibrations of
    another fabric; an explicit id of another fabric is refused, naming what differs)."""
    if not spec or spec == "none":
        return None
    from genie.store import DEFAULT_STORE, RunStore

    path = Path(store_path or DEFAULT_STORE)
    if spec == "latest":
        if testbed_name is None or not path.is_file():
            return None
        with RunStore(path) as st:
            docs = st.calibrations(testbed_name)
        here = identity(topology) if topology is not None else None
        for doc in docs:
            cal = msgspec.convert(doc, Calibration)
            if not cal.offered:
                continue
            if here is not None and cal.identity and mismatch(cal.identity, here):
                continue
            return cal
        return None
    if not path.is_file():
        raise StoreError(f"no run store at {path} to find calibration {spec!r} in (--store)")
    with RunStore(path) as st:
        cal = load(st, spec)
    if not cal.offered:
        why = cal.verdict or "not offered: it was not judged on held-back sizes"
        raise CalibrationError(
            f"calibration {cal.cal_id} is not offered ({why.removeprefix('not offered: ')}): "
            "price nominally (--calibration none) or calibrate again"
        )
    if topology is not None:
        check_fabric(cal, topology)
    return cal
