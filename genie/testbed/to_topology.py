"""Turn a Testbed into the cost model's Topology (``genie.collectives.topology``)."""

from __future__ import annotations

from typing import Any

from genie.errors import TestbedError
from genie.testbed.model import Testbed


def testbed_topology(tb: Testbed) -> Any:
    """The Topology of ``tb``: its hosts, switches and links with their rates."""
    try:
        from genie.collectives import topology
    except ImportError:
        raise TestbedError(
            "the cost-model topology module (genie.collectives.topology) is not installed"
        ) from None
    return topology.from_testbed(tb)  # adapted once the module lands
