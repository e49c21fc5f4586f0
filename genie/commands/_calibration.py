"""``--calibration`` (bench, emulate, simulate) and ``--dilation`` (bench, emulate): shared options.

``--calibration ID`` prices with a stored calibration (``genie calibrate``); ``latest`` with the
newest one stored for the testbed in use (nothing when there is none); ``none`` with the nominal
model only. ``resolve`` turns the option into a ``Calibration`` (or None) and a note saying
which model priced the numbers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from genie.calibration.model import Calibration
from genie.store import DEFAULT_STORE, RunStore


def add_argument(p: argparse.ArgumentParser, default: str) -> None:
    """Add ``--calibration`` with ``default`` (``latest`` or ``none``)."""
    p.add_argument(
        "--calibration",
        default=default,
        metavar="ID",
        help="price the model also with this stored calibration (genie calibrate RUN); "
        f"'latest' = the newest of this testbed, 'none' = nominal only (default {default})",
    )


def add_dilation_argument(p: argparse.ArgumentParser, what: str) -> None:
    """Add ``--dilation K``; ``what`` says what the command stretches and divides."""
    from genie.commands import _args as A

    p.add_argument(
        "--dilation",
        type=A.real(1, 1000, lo_open=False),
        default=1.0,
        metavar="K",
        help=f"time dilation: {what}, i.e. links K times faster (latency and software overhead "
        "/ K too; the report says how much that matters) (default 1)",
    )


def load(store: RunStore, cal_id: str) -> Calibration:
    """A stored calibration by id (a unique prefix works)."""
    return msgspec.convert(store.calibration(cal_id), Calibration)


def resolve(
    spec: str | None, store_path: str | Path | None, testbed_name: str | None
) -> Calibration | None:
    """The calibration ``--calibration spec`` names (None: price nominally only).

    An explicit id that is not in the store is an error; ``latest`` without a store or without
    a calibration of this testbed is simply no calibration.
    """
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
        from genie.errors import StoreError

        raise StoreError(f"no run store at {path} to find calibration {spec!r} in (--store)")
    with RunStore(path) as st:
        return load(st, spec)


def apply(args: argparse.Namespace, topology, testbed_name: str | None = None):
    """``topology`` priced with the calibration ``args.calibration`` names (unchanged: none)."""
    from genie.calibration.model import calibrate_topology

    cal = resolve(getattr(args, "calibration", None), getattr(args, "store", None), testbed_name)
    return topology if cal is None else calibrate_topology(topology, cal)
