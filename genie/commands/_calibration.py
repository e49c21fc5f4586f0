"""``--calibration`` (bench, emulate, simulate) and ``--dilation`` (bench, emulate): shared options.

``--calibration ID`` prices with a stored calibration (``genie calibrate``); ``latest`` with the
newest one stored for the testbed in use that is offered (fitted on this fabric, no physical
bound binding, held-back error clearly better than nominal; nothing when there is none);
``none``, the default everywhere, with the nominal model only: nothing applies a calibration
silently (``genie.calibration.stored.resolve`` finds it).
"""

from __future__ import annotations

import argparse


def add_argument(p: argparse.ArgumentParser, default: str) -> None:
    """Add ``--calibration`` with ``default`` (``none``: nominal only)."""
    p.add_argument(
        "--calibration",
        default=default,
        metavar="ID",
        help="price the model also with this stored calibration (genie calibrate RUN); "
        "'latest' = the newest offered one of this testbed and fabric, 'none' = nominal only "
        f"(default {default})",
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
