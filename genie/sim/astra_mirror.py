"""When one rank's run of a collective stands for every member's (ASTRA-sim's unaware model).

``genie.sim.astra_model`` runs a congestion-unaware collective whose members all start at the
same time for one representative rank only, feeding it the messages its peers send as mirror
images of its own (the peer that sends to it at step k does so when it sends at step k). That
is exact when every member runs the same timeline, which holds by induction over time when:

(a) all members start together on idle queues (the caller checks: every lane's head, one tick);
(b) the algorithm's peer pattern is a group action on ring positions, the same step from every
    position: ring (``i +- 1``), direct (``i + j``, skipping ``i``) and halving-doubling
    (``i XOR 2^k``) are;
(c) the delay of a step's message is the same from every position (``uniform_ring``): the
    message time depends only on the pair's first differing dimension and hop count there, so
    each step's (dimension, hops) must be one value over the ring;
(d) no same-tick event order decides anything: a packet's receive and a token's return on one
    chunk in one tick can send at once or one endpoint delay later, depending on which runs
    first, and the full simulation's order is not the mirrored one's, so such a tie makes the
    caller simulate every rank (``astra_model`` checks it while running).

Every other event on a rank (tokens, receives of other chunks, queue hand-overs) commutes.
"""

from __future__ import annotations

import numpy as np

from genie.sim.astra_config import AstraNetwork


class RingGeometry:
    """Pair keys (first differing dimension, hops there) over a network, for ``uniform_ring``."""

    def __init__(self, net: AstraNetwork) -> None:
        self.net = net
        n = net.total_npus
        ids = np.arange(n, dtype=np.int64)
        self.addr = np.empty((n, net.dims), np.int64)  # dimension 0 fastest
        for d, k in enumerate(net.npus):
            self.addr[:, d] = ids % k
            ids //= k
        self.size = np.asarray(net.npus, np.int64)
        self.ring = np.asarray([t == "Ring" for t in net.topology])
        self._memo: dict[tuple, bool] = {}

    def _keys(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(dimension, hops) of each pair ``a[i] -> b[i]``; None if a pair is one NPU."""
        xa, xb = self.addr[a], self.addr[b]
        diff = xa != xb
        if not diff.any(axis=1).all():
            return None
        dim = diff.argmax(axis=1)
        rows = np.arange(len(a))
        x, y = xa[rows, dim], xb[rows, dim]
        n = self.size[dim]
        cw = (y - x) % n
        hops = np.where(self.ring[dim], np.minimum(cw, n - cw), 0)  # Switch / FC: constant
        return dim, hops

    def uniform_ring(self, members: tuple[int, ...], algorithm: str) -> bool:
        """Whether each step of ``algorithm`` on the ring ``members`` has one delay key for every
        position (obligation (c)); ring and halving-doubling cost O(n log n), direct O(n^2)."""
        key = (members, algorithm)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._uniform(members, algorithm)
        return got

    def _uniform(self, members: tuple[int, ...], algorithm: str) -> bool:
        n = len(members)
        if n <= 1:
            return True
        net = self.net
        if net.dims == 1 and net.topology[0] in ("Switch", "FullyConnected"):
            return True  # every pair: the same hops on the one dimension
        m = np.asarray(members, np.int64)
        pos = np.arange(n, dtype=np.int64)
        if algorithm == "halvingDoubling":
            partners = [pos ^ (1 << k) for k in range(n.bit_length() - 1)]
        elif algorithm == "direct":
            partners = [(pos + j) % n for j in range(1, n)]
        else:  # ring: i -> i + 1 (i -> i - 1 is the same pairs reversed)
            partners = [(pos + 1) % n]
        for p in partners:
            keys = self._keys(m, m[p])
            if keys is None:
                return False
            for k in keys:
                if (k != k[0]).any():
                    return False
        return True
