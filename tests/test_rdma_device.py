"""The RDMA data path on a real verbs device (hardware or soft-RoCE): real agents, checked bytes.

Runs only where a device exists; otherwise every test skips with the check that failed, in
order: (1) a device in /sys/class/infiniband, (2) the pyverbs import, (3) an ACTIVE port with
a usable GID. Bring one up with ``genie testbed softroce up --netdev IF`` on a kernel with rdma_rxe.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from genie.collectives import build_program
from genie.collectives.data_exec import run_data
from genie.collectives.program import Op
from genie.controller.local import LocalCluster, open_controller
from genie.errors import TransportError
from genie.wire.messages import DataOptions, RdmaOptions
from genie_agent.dataplane.rdma_conn import SYS_IB, find_devices, no_device_message
from genie_agent.dataplane.tcp import pattern_fill


def device_check() -> tuple[str, str]:
    """(device name, "") when the data path can run here, else ("", why not: the failed check)."""
    devs = find_devices()
    if not devs:
        return "", f"check 1 failed (RDMA device in {SYS_IB}): {no_device_message()}"
    try:
        from genie_agent.dataplane.rdma import load_pyverbs

        load_pyverbs()
    except TransportError as exc:
        return "", f"check 2 failed (pyverbs import): {exc}"
    for d in devs:
        for p in d.ports:
            if p.state == "ACTIVE" and (p.link_layer == "InfiniBand" or p.gids):
                return d.name, ""
    return "", f"check 3 failed (ACTIVE port with a GID): {[d.name for d in devs]} have none"


DEVICE, WHY = device_check()
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")


@pytest.fixture(scope="module")
def ctl():
    cl = LocalCluster.start(3, heartbeat_s=0.2)
    c = open_controller(cl.testbed)
    try:
        c.connect()
        c.sync_clocks(rounds=4)
        yield c
    finally:
        c.close()
        c.t.close()
        cl.stop()


def _want(program, reps: int) -> dict[int, int]:
    size = program.buffer_bytes(0)
    bufs = []
    for r in range(program.n_ranks):
        b = np.empty(size, dtype=np.uint8)
        pattern_fill(b, r)
        bufs.append(b.astype(np.int64))
    for _ in range(reps):
        bufs = [b % 256 for b in run_data(program, bufs).buffers]
    return {r: zlib.crc32(b.astype(np.uint8).tobytes()) for r, b in enumerate(bufs)}


@pytest.mark.parametrize(
    ("mode", "events"), [("write_imm", False), ("send", False), ("write_imm", True)]
)
def test_all_reduce_over_rdma_computes_the_sum(ctl, mode: str, events: bool) -> None:
    prog = build_program("all_reduce", "ring", 3, 3 * 300_000, chunks=2)
    opts = DataOptions(
        transport="rdma", rdma=RdmaOptions(device=DEVICE, mode=mode, events=events, segment=65536)
    )
    ctl.prepare([prog], ["h0", "h1", "h2"], opts)
    out = ctl.run(iters=3, warmup=1)
    ctl.release()
    ranks = {r.rank: r for res in out.results.values() for r in res.ranks}
    assert {r: x.buffer_crc for r, x in ranks.items()} == _want(prog, 4)
    for r, x in ranks.items():
        want = sum(s.nbytes for s in prog.steps(r) if s.op == Op.RECV)
        assert x.bytes_received == 4 * want


def test_same_program_same_results_on_tcp_and_rdma(ctl) -> None:
    prog = build_program("all_gather", "ring", 3, 64 * 1024)
    crcs = {}
    for transport in ("tcp", "rdma"):
        ctl.prepare([prog], ["h0", "h1", "h2"], DataOptions(
            transport=transport, rdma=RdmaOptions(device=DEVICE)))  # fmt: skip
        out = ctl.run(iters=2)
        ctl.release()
        crcs[transport] = {r.rank: r.buffer_crc for res in out.results.values() for r in res.ranks}
    assert crcs["tcp"] == crcs["rdma"]
