"""Network backends fed by the wire: the replay's times measured on the agents.

* ``TestbedBackend`` (isolated mode): each instance takes the median measured for its own
  (collective, size, group), run alone on the agents;
* ``InstanceBackend`` (overlapped mode): each instance takes the time measured for that very
  instance while the whole trace ran on the wire.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from genie.errors import StoreError
from genie.live.plan import Key
from genie.sim.network import FixedTimeBackend, Pricer, Transfer
from genie.vocabulary import chakra_name


@dataclass
class Measured:
    """One distinct collective measured on the testbed."""

    key: Key
    collective: str
    algorithm: str
    count: int  # instances of it in the workload
    times: list[float] = field(default_factory=list)  # measured (non-warm-up) seconds
    modeled_s: float | None = None

    @property
    def p50(self) -> float:
        """Median measured time (seconds)."""
        return float(np.median(self.times)) if self.times else math.nan


class TestbedBackend(FixedTimeBackend):
    """Each instance takes the median time measured for its own (collective, size, group).

    With a ``pricer``, instances in flight together share links as the analytical model says,
    each scaled to its measured standalone time; without one, they do not slow each other.
    """

    __test__ = False

    def __init__(
        self, table: dict[Key, Measured], name: str = "testbed", pricer: Pricer | None = None
    ) -> None:
        self.table = table
        super().__init__(name, pricer)
        how = (
            "do not slow each other"
            if pricer is None
            else "share links as the analytical model says"
        )
        self.notes = [
            "testbed (isolated): each collective measured alone on the agents; collectives in "
            f"flight together {how}, they were not on the wire together"
        ]

    def alone(self, transfer: Transfer) -> float:
        """The measured median of this transfer's (collective, size, ranks)."""
        key = (transfer.comm_type, transfer.size, tuple(transfer.ranks))
        m = self.table.get(key)
        if m is None or not m.times:
            raise StoreError(f"no measured time for {chakra_name(transfer.comm_type)} {key[1:]}")
        return m.p50

    duration = alone


class InstanceBackend(FixedTimeBackend):
    """Each instance takes the time measured for that very instance on the wire (median)."""

    def __init__(self, times: dict[int, float], name: str = "testbed") -> None:
        self.times = times
        super().__init__(name)
        self.notes = [
            "testbed (overlapped): the whole trace's communication ran on the agents with the "
            "compute gaps honoured; each instance takes its own measured time (median over "
            "iterations), so interference between collectives in flight together is measured"
        ]

    def duration(self, transfer: Transfer) -> float:
        """The measured time of this instance."""
        t = self.times.get(transfer.iid)
        if t is None:
            raise StoreError(f"no measured time for instance {transfer.iid}")
        return t
