"""Time dilation: emulate a fabric K times faster than the lab's by running K times slower.

A dilated run multiplies the trace's compute gaps by K and divides every measured time by K:
the wire's bytes then take 1/K of their time, as on links K times faster. What does not scale is
every fixed time of the lab: latency per hop, per-message cost and the agents' per-step
software overhead are divided by K too, so the dilated figures stand for a fabric that is K
times faster in bandwidth AND in latency. ``fixed_times`` says what those were in the lab
(from the model pricing it: calibrated where there is a calibration), ``kept_latency`` prices
what a fabric K times faster in bandwidth only (the lab's latency and overhead kept) would take
instead, per collective; the commands report the difference.

Everything here is pure arithmetic on the cost model (``scaled_topology``): a dilated model of
the lab is the lab's model with bandwidths x K and fixed times / K, which is exactly the lab's
model time / K (the model is homogeneous in time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genie.calibration.model import scaled_topology
from genie.errors import UsageError

MAX_DILATION = 1000.0


def run_dilation(meta: Mapping[str, Any] | None) -> float:
    """A stored run's dilation factor from its meta (1 for a run stored without one)."""
    k = (meta or {}).get("dilation")
    return float(k) if isinstance(k, int | float) and k > 0 else 1.0


def reported_s(wire_s: float, k: float) -> float:
    """The one definition of a dilated run's time: the wire's time divided by ``k``.

    The run store keeps the wire's times (a calibration fits the lab); ``genie bench`` and
    ``genie emulate`` print them divided by ``k``, and so do ``genie report`` and ``genie runs
    show``, through this function, so a run reads the same everywhere.
    """
    return wire_s / k


def check_dilation(k: float) -> float:
    """``k`` if it is a usable dilation factor (finite, >= 1, at most ``MAX_DILATION``)."""
    if not (isinstance(k, int | float) and math.isfinite(k) and 1 <= k <= MAX_DILATION):
        raise UsageError(f"--dilation must be 1..{MAX_DILATION:g}, got {k!r}")
    return float(k)


def dilated_topology(topology: Any, k: float) -> Any:
    """What a dilated run emulates: bandwidth x k, every fixed time / k."""
    return scaled_topology(topology, bandwidth=k, time=1.0 / k)


def kept_latency_topology(topology: Any, k: float) -> Any:
    """The fabric the question is about: bandwidth x k, the lab's fixed times kept."""
    return scaled_topology(topology, bandwidth=k, time=1.0)


def fixed_times(topology: Any) -> str:
    """The lab's fixed times in words (what dilation divides and should not)."""
    lats = sorted({lk.latency for lk in topology.links})
    hop = ", ".join(f"{x * 1e6:.3g} us" for x in lats[:3]) or "0 us"
    return (
        f"latency per hop {hop}, per-message cost {topology.message_latency * 1e6:.3g} us, "
        f"per-step software overhead {topology.step_overhead * 1e6:.3g} us"
    )


@dataclass
class KeptLatency:
    """One collective: the dilated model's time and the time with the lab's latency kept."""

    label: str
    size: int
    dilated_s: float
    kept_s: float

    @property
    def pct(self) -> float:
        """How much longer the kept-latency fabric takes, percent of the dilated time."""
        return (self.kept_s - self.dilated_s) / self.dilated_s * 100.0 if self.dilated_s else 0.0


def kept_latency(
    items: Sequence[tuple[str, int, Any, Sequence[Any]]], topology: Any, k: float
) -> list[KeptLatency]:
    """Per (label, size, program, hosts): the dilated time vs the lab latency kept (model)."""
    from genie.collectives.cost import estimate

    fast = dilated_topology(topology, k)
    kept = kept_latency_topology(topology, k)
    out = []
    for label, size, program, hosts in items:
        out.append(
            KeptLatency(
                label,
                size,
                float(estimate(program, fast, list(hosts)).time_s),
                float(estimate(program, kept, list(hosts)).time_s),
            )
        )
    return out


def dilation_note(k: float, topology: Any, model: str, effects: Sequence[tuple[str, float]]) -> str:
    """The report's paragraph: what scaled, what did not, and how much that matters.

    ``effects``: (what, percent longer with the lab's fixed times kept), e.g. per size.
    """
    said = ", ".join(f"{what} {pct:+.1f} %" for what, pct in effects) or "-"
    return (
        f"dilation x{k:g}: times are the lab's divided by {k:g}, as on links {k:g}x faster. The "
        f"lab's fixed times ({fixed_times(topology)}) do not get faster with the links, yet they "
        f"were divided by {k:g} too, so these figures assume a fabric with 1/{k:g} of the lab's "
        f"latency and overhead. With the lab's latency and overhead kept, the model ({model}) "
        f"says: {said}"
    )
