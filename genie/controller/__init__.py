"""The controller side of the testbed runtime: sessions with agents, placement, results, bench."""

from genie.controller.channel import Channel, InProcChannel, ZmqChannel
from genie.controller.placement import place_ranks
from genie.controller.results import Instance, Stats, completion_times, stats
from genie.controller.session import Controller, RunOutcome, Timeouts

__all__ = [
    "Channel",
    "Controller",
    "InProcChannel",
    "Instance",
    "RunOutcome",
    "Stats",
    "Timeouts",
    "ZmqChannel",
    "completion_times",
    "place_ranks",
    "stats",
]
