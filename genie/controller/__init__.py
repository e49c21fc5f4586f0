"""The controller side of the testbed runtime: sessions with agents, placement, results, bench."""

from genie.controller.placement import place_ranks
from genie.controller.results import Instance, Stats, completion_times, stats
from genie.controller.session import Controller, RunOutcome, Timeouts
from genie.controller.transport import InProcTransport, Transport, ZmqTransport

__all__ = [
    "Controller",
    "InProcTransport",
    "Instance",
    "RunOutcome",
    "Stats",
    "Timeouts",
    "Transport",
    "ZmqTransport",
    "completion_times",
    "place_ranks",
    "stats",
]
