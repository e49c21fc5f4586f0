"""End to end on loopback: real agent processes, every collective/algorithm, checked bytes."""

from __future__ import annotations

import time

import pytest
import zmq

from genie.collectives import ALGORITHMS, build_program
from genie.collectives.program import Op
from genie.controller.local import LocalCluster, open_controller
from genie.errors import RuntimeFault
from genie.wire import messages as p

N_AGENTS = 4
ITERS, WARMUP = 2, 1


@pytest.fixture(scope="module")
def cluster():
    cl = LocalCluster.start(N_AGENTS, heartbeat_s=0.2)
    try:
        yield cl
    finally:
        cl.stop()  # by pid, always


@pytest.fixture
def ctl(cluster):
    c = open_controller(cluster.testbed)
    c.connect()
    c.sync_clocks(rounds=8)
    try:
        yield c
    finally:
        c.close()
        c.t.close()


PAIRS = [(c, a) for c, algos in ALGORITHMS.items() for a in algos]


def _expected_buffer_crcs(program, repetitions: int) -> dict[int, int]:
    import zlib

    import numpy as np

    from genie.collectives.data_exec import run_data
    from genie_agent.dataplane.tcp import pattern_fill

    size = program.buffer_bytes(0)
    bufs = []
    for r in range(program.n_ranks):
        b = np.empty(size, dtype=np.uint8)
        pattern_fill(b, r)
        bufs.append(b.astype(np.int64))
    for _ in range(repetitions):
        bufs = [b % 256 for b in run_data(program, bufs).buffers]
    return {r: zlib.crc32(b.astype(np.uint8).tobytes()) for r, b in enumerate(bufs)}


def _expected_recv(program, rank: int, placement: list[str]) -> tuple[int, int]:
    """(RECVs from ranks on other hosts: the frames CRC-checked off TCP, bytes of all RECVs);
    RECVs from the same host take the intra-host model in memory (no frame, no check)."""
    steps = program.steps(rank)
    recvs = [s for s in steps if s.op == Op.RECV]
    remote = [s for s in recvs if placement[s.peer] != placement[rank]]
    return len(remote), sum(s.nbytes for s in recvs)


@pytest.mark.parametrize(("collective", "algorithm"), PAIRS, ids=[f"{c}-{a}" for c, a in PAIRS])
def test_every_collective_moves_checked_bytes(ctl, collective: str, algorithm: str) -> None:
    hier = algorithm == "hierarchical"
    placement = ["h0", "h0", "h1", "h1"] if hier else ["h0", "h1", "h2", "h3"]
    prog = build_program(collective, algorithm, 4, 8192, chunks=2, ranks_per_host=2 if hier else 1)
    ctl.prepare([prog], placement)
    out = ctl.run(iters=ITERS, warmup=WARMUP)
    ctl.release()
    assert len(out.instances) == ITERS + WARMUP
    assert all(x.time_s > 0 for x in out.instances)
    ranks = {r.rank: r for res in out.results.values() for r in res.ranks}
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank, rr in ranks.items():
        n_recv, recv_bytes = _expected_recv(prog, rank, placement)
        assert rr.messages_verified == n_recv * (ITERS + WARMUP), (rank, rr)
        assert rr.bytes_received == recv_bytes * (ITERS + WARMUP)
    assert sum(r.bytes_sent for r in ranks.values()) == sum(
        r.bytes_received for r in ranks.values()
    )
    # the wire computed the collective: final buffers match the data executor's, run the same
    # number of times from the same per-rank byte patterns (uint8, wrapping adds)
    want = _expected_buffer_crcs(prog, ITERS + WARMUP)
    assert {r: rr.buffer_crc for r, rr in ranks.items()} == want


def test_parallel_streams_and_repeated_gos_reuse_connections(ctl) -> None:
    from genie.wire.messages import DataOptions

    progs = [build_program("all_reduce", "ring", 4, s) for s in (1 << 20, 4096)]
    ctl.prepare(progs, ["h0", "h1", "h2", "h3"], DataOptions(streams=3))
    a = ctl.run(program=0, iters=2)
    b = ctl.run(program=1, iters=3, record_steps=True)
    c = ctl.run(program=0, iters=1)
    ctl.release()
    assert [len(x.instances) for x in (a, b, c)] == [2, 3, 1]
    assert all(x.step0_spread_ns >= 0 for x in b.instances)
    # 1 MiB ring: each rank receives 2*(n-1) chunks of 256 KiB, each split across 3 streams
    rr = next(r for res in a.results.values() for r in res.ranks)
    assert rr.messages_verified == 2 * 6 * 3


def test_sweep_hands_over_each_batch_as_it_ends(ctl) -> None:
    from genie.controller.sweep import sweep

    progs = [build_program("all_gather", "ring", 4, s) for s in (1024, 8192)]
    batches: list[tuple[int, list[int], list[bool]]] = []

    def on_batch(prog, batch) -> None:
        batches.append((prog.spec.size, [x.iteration for x in batch], [x.warmup for x in batch]))

    rows = sweep(ctl, progs, ["h0", "h1", "h2", "h3"], iters=4, warmup=1, on_instances=on_batch)
    assert [r.stats.n for r in rows] == [4, 4]
    for size in (1024, 8192):
        mine = [b for b in batches if b[0] == size]
        assert len(mine) >= 2  # the first Go runs one measured iteration, the rest follow
        iterations = [i for b in mine for i in b[1]]
        assert iterations == list(range(len(iterations)))  # consecutive across batches
        assert [w for b in mine for w in b[2]].count(True) == 1


def test_clock_offsets_are_small_on_one_machine(ctl) -> None:
    for est in ctl.offsets.values():
        # one machine, one monotonic clock: the estimate must sit within its own uncertainty
        # (plus slack for scheduling on a loaded 2-core box)
        assert abs(est.offset_ns) <= est.uncertainty_ns + 2_000_000
        assert est.samples == 8


def test_malformed_frames_and_stale_epoch_do_not_hurt_a_real_agent(cluster, ctl) -> None:
    h = cluster.testbed.hosts[0]
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.ROUTER)
    raw.setsockopt(zmq.CONNECT_ROUTING_ID, h.name.encode())
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://{h.control}")
    try:
        for junk in (b"\xff\x00garbage", b"", p.encode(p.Go(job="nope", epoch=99))):
            raw.send_multipart([h.name.encode(), junk])
        codes = []
        deadline = time.monotonic() + 5
        while len(codes) < 3 and time.monotonic() < deadline:
            if raw.poll(200):
                msg = p.decode(raw.recv_multipart()[-1])
                if isinstance(msg, p.Error):
                    codes.append(msg.code)
    finally:
        raw.close()
    # a stranger's job message is refused as busy (it does not hold the agent)
    assert sorted(codes) == ["busy", "malformed", "malformed"]
    # the holder's own stale Go is refused as stale
    ctl._send(h.name, p.Go(job="old-job", epoch=99))
    item = ctl.t.recv(5.0)
    while item and isinstance(p.decode(item[1]), p.Heartbeat):
        item = ctl.t.recv(5.0)
    assert item is not None and p.decode(item[1]).code == "stale"
    # the agent is alive and still serves its controller
    prog = build_program("all_gather", "ring", 4, 1024)
    ctl.prepare([prog], ["h0", "h1", "h2", "h3"])
    assert len(ctl.run(iters=1).instances) == 1
    ctl.release()


def test_second_controller_is_refused_naming_the_holder(cluster, ctl) -> None:
    other = open_controller(cluster.testbed)
    try:
        with pytest.raises(RuntimeFault, match=f"busy.*{ctl.id}"):
            other.connect()
    finally:
        other.t.close()


def _bench_cli(argv: list[str]) -> int:
    import argparse

    from genie.commands import bench

    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return args.func(args)


def test_bench_cli_prints_rows_and_fills_the_store(cluster, tmp_path, capsys) -> None:
    import json

    from genie.store import RunStore

    store = tmp_path / "runs.sqlite"
    rc = _bench_cli(
        [
            "--testbed",
            str(cluster.testbed_path),
            "--collective",
            "all_gather",
            "--algo",
            "ring",
            "--sizes",
            "4KiB,64KiB",
            "--iters",
            "3",
            "--warmup",
            "2",
            "--repeats",
            "2",
            "--json",
            "--store",
            str(store),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in out["rows"]] == [4096, 65536]
    for r in out["rows"]:
        # two repeats of 3 measured iterations each, pooled; each repeat's own p50 kept
        assert r["iterations"] == 6 and r["time_min_s"] <= r["time_p50_s"] <= r["time_max_s"]
        assert len(r["repeat_p50_s"]) == 2 and r["repeat_spread"] >= 0
        assert all(r["time_min_s"] <= p <= r["time_max_s"] for p in r["repeat_p50_s"])
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"] * 3 / 4)
        assert r["modeled_s"] and r["modeled_s"] > 0
    with RunStore(store) as st:
        info = st.run(out["run_id"])
        assert info.status == "ok" and info.instances == 2 * 2 * (3 + 2)
        assert sorted(info.clock_offsets) == ["h0", "h1", "h2", "h3"]
        assert info.host_facts["h0"]["cpus_logical"] >= 1
        times = st.size_times(info.run_id, "all_gather", "ring")
        assert {k: len(v) for k, v in times.items()} == {4096: 6, 65536: 6}
        assert min(times[4096]) == pytest.approx(out["rows"][0]["time_min_s"])


def test_bench_on_a_dead_testbed_fails_cleanly(tmp_path) -> None:
    from genie.controller.local import free_port_range
    from genie.testbed import dumps_testbed, loopback_testbed

    tb = tmp_path / "dead.toml"
    tb.write_text(dumps_testbed(loopback_testbed(2, base_port=free_port_range(2))))
    from genie.api.benchmark import BenchSpec, bench
    from genie.controller.session import Timeouts
    from genie.store import RunStore

    cfg = BenchSpec(
        testbed=str(tb),
        store=str(tmp_path / "s.sqlite"),
        progress=False,
    )
    with pytest.raises(RuntimeFault, match=r"no hello from agents h0, h1") as info_:
        bench(cfg, timeouts=Timeouts(register_s=0.3))
    said = str(info_.value)
    assert "nothing accepts connections at 127.0.0.1:" in said and "start the agents" in said

    with RunStore(tmp_path / "s.sqlite") as st:
        (info,) = st.list_runs()
        assert info.status == "failed" and info.error == said  # the stored reason is the line
