"""Stored calibrations: the one ``genie calibrate`` stored by id, or the newest of a testbed.

``resolve("none" | "latest" | ID, store, testbed)`` is the calibration a run prices with (None:
the nominal model only). An explicit id that is not in the store is an error; ``latest``
without a store or without a calibration of that testbed is simply no calibration.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from genie.calibration.model import Calibration
from genie.errors import StoreError
from genie.store import DEFAULT_STORE, RunStore


def load(store: RunStore, cal_id: str) -> Calibration:
    """A stored calibration by id (a unique prefix works)."""
    return msgspec.convert(store.calibration(cal_id), Calibration)


def resolve(
    spec: str | None, store_path: str | Path | None, testbed_name: str | None
) -> Calibration | None:
    """The calibration ``spec`` names (``none``/None: price nominally only; see the module)."""
    if not spec or spec == "none":
        return None
    path = Path(store_path or DEFAULT_STORE)
    if spec == "latest":
        if testbed_name is None or not path.is_file():
            return None
        with RunStore(path) as st:
            docs = st.calibrations(testbed_name)
        return msgspec.convert(docs[0], Calibration) if docs else None
    if not path.is_file():
        raise StoreError(f"no run store at {path} to find calibration {spec!r} in (--store)")
    with RunStore(path) as st:
        return load(st, spec)
