"""A quick probe of a testbed's real fabric, so its cost model prices what the wire does.

A loopback cluster is not shaped: its links are as fast as the machine's CPUs move bytes through
TCP, and every step pays the agents' software overhead. ``probe_fabric`` runs a ring all-reduce
over every agent at three sizes and fits the alpha-beta form of that collective on a star,
``t = 2 (n-1) (alpha + S / (n B))``, to the medians: ``alpha`` is the per-message cost (route
latency plus software overhead) and ``B`` the rate each link delivers while the whole ring runs
(so sharing of the machine's cores is in it). ``probed_testbed`` writes them into the links
(latency alpha/2 per link, since a message crosses two) with a note saying so.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

from genie.collectives import build_program
from genie.controller.local import open_controller
from genie.controller.sweep import run_size
from genie.errors import RuntimeFault
from genie.testbed.model import Link, Testbed
from genie.units import format_bytes

log = logging.getLogger(__name__)

SIZES = (64 << 10, 1 << 20, 16 << 20)  # bytes: from per-message cost bound to rate bound


@dataclass(frozen=True)
class FabricProbe:
    """What a probe measured: per-message cost (s), per-link rate (bytes/s), and the raw data."""

    alpha_s: float
    rate_Bps: float
    n_ranks: int
    times_s: dict[int, float]  # buffer size -> median time of the ring all-reduce
    when: str = ""  # local time of the probe

    def describe(self) -> str:
        """One line for "model" columns and testbed notes."""
        return (
            f"probed {self.when}: {self.rate_Bps / 1e9:.3f} GB/s per "
            f"link, {self.alpha_s * 1e6:.0f} us per message (fit to a ring all-reduce on "
            f"{self.n_ranks} agents at {', '.join(format_bytes(s) for s in self.times_s)})"
        )


def fit_ring(n: int, times: dict[int, float]) -> tuple[float, float]:
    """(alpha s, B bytes/s) of ``t = 2(n-1)(alpha + S/(nB))``, least squares in relative error.

    Each point is weighted by 1/t so small and large sizes count alike; alpha is kept >= 0 and
    B > 0 (a negative fitted alpha is refitted through the origin).
    """
    import numpy as np

    k = 2 * (n - 1)
    sizes = np.array(sorted(times), dtype=float)
    t = np.array([times[int(s)] for s in sizes])
    a = np.stack([np.full_like(sizes, k), k * sizes / n], axis=1) / t[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0 or per_byte <= 0:
        alpha = 0.0
        per_byte = float(np.sum(k * sizes / n / t) / np.sum((k * sizes / n / t) ** 2))
    return float(alpha), 1.0 / max(float(per_byte), 1e-15)


def probe_fabric(tb: Testbed, iters: int = 7, warmup: int = 2) -> FabricProbe:
    """Run a ring all-reduce on every agent of ``tb`` at ``SIZES``; fit alpha and B."""
    agents = [h.name for h in tb.hosts]
    n = len(agents)
    if n < 2:
        raise RuntimeFault("a fabric probe needs at least 2 agents")
    ctl = open_controller(tb)
    try:
        ctl.connect()
        ctl.sync_clocks(rounds=4)
        times = {}
        for size in SIZES:
            prog = build_program("all_reduce", "ring", n, size, size_convention="nccl")
            inst = run_size(ctl, prog, agents, iters=iters, warmup=warmup)
            times[size] = statistics.median(x.time_s for x in inst if not x.warmup)
    finally:
        ctl.close()
        ctl.t.close()
    alpha, rate = fit_ring(n, times)
    when = time.strftime("%Y-%m-%d %H:%M")
    probe = FabricProbe(alpha_s=alpha, rate_Bps=rate, n_ranks=n, times_s=times, when=when)
    log.info("fabric probe of %s: %s", tb.name, probe.describe())
    return probe


def probed_testbed(tb: Testbed, probe: FabricProbe) -> Testbed:
    """``tb`` with every link at the probed rate and half the per-message cost as latency."""
    import msgspec

    links = [
        Link(a=lk.a, b=lk.b, rate=probe.rate_Bps, mtu=lk.mtu, latency=probe.alpha_s / 2)
        for lk in tb.links
    ]
    return msgspec.structs.replace(tb, links=links, model=probe.describe(), rates="payload")


def probe_cluster(cluster) -> FabricProbe:
    """Probe a running ``LocalCluster`` and rewrite its testbed file with the probed rates."""
    from genie.testbed import dumps_testbed

    probe = probe_fabric(cluster.testbed)
    cluster.testbed = probed_testbed(cluster.testbed, probe)
    cluster.testbed_path.write_text(dumps_testbed(cluster.testbed))
    return probe
