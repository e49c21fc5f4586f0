"""The controller side of the testbed runtime: sessions with agents, results, bench."""

from genie.controller.channel import Channel, InProcChannel, ZmqChannel
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
    "stats",
]
