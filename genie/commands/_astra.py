"""ASTRA-sim's options of ``genie simulate``: ``--model``, ``--astra-network``, ``--astra-system``,
``--comm-group`` (``genie.api.astra`` does what they ask).

With ``--model genie`` the ASTRA-sim files set genie's own model instead: a 1-D network's
building block becomes genie's topology (Ring -> ring, Switch -> switch, FullyConnected ->
fully_connected) with its bandwidth (2^30 B/s) and latency per link, each collective's first
implementation its algorithm, and ``preferred-dataset-splits`` the chunk count.
"""

from __future__ import annotations

import argparse

from genie.api.specs import MODELS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ASTRA-sim options of ``genie simulate``."""
    p.add_argument(
        "--model",
        choices=MODELS,
        default="genie",
        help="pricing model: genie (default: genie's own), astra-unaware / astra-aware "
        "(ASTRA-sim 2.0's analytical congestion-unaware / -aware backend, reproduced)",
    )
    p.add_argument("--astra-network", metavar="N.yml", help="ASTRA-sim analytical network file")
    p.add_argument("--astra-system", metavar="S.json", help="ASTRA-sim system file")
    p.add_argument(
        "--comm-group",
        metavar="G.json",
        help='ASTRA-sim comm-group file {"<pg_name>": [ranks]} (default: PREFIX.comm_group.json)',
    )
