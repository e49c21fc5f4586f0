"""Pure RDMA connection rules: sysfs devices, port/GID choice, QP attributes, exchange, imm."""

from __future__ import annotations

import socket
import threading

import pytest

from genie.collectives.program import ProgramSpec
from genie.errors import TransportError
from genie.wire.messages import Limits, QpFacts, RdmaOptions
from genie_agent.dataplane.rdma_conn import (
    IMM_READY,
    Choice,
    NoRdmaDevice,
    check_options,
    choose_port,
    decode_imm,
    exchange_facts,
    find_devices,
    gid_hex,
    gid_text,
    imm_data,
    imm_ready,
    init_attrs,
    no_device_message,
    path_mtu,
    rdma_conditions,
    recv_slots,
    rtr_attrs,
    rts_attrs,
    segments,
    send_targets,
    wc_status_name,
)
from genie_agent.plan import plan_agent
from genie_agent.programs import builtin_program

V4 = "0000:0000:0000:0000:0000:ffff:c612:0001"  # ::ffff:198.18.0.1
LL = "fe80:0000:0000:0000:0a00:27ff:fe00:0001"


def _sysfs(root, name="rxe0", state="4: ACTIVE", layer="Ethernet", gids=((0, LL, "RoCE v2"),)):
    port = root / name / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "gid_attrs" / "ndevs").mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "link_layer").write_text(layer + "\n")
    (port / "lid").write_text("0x0\n")
    for i in range(4):
        (port / "gids" / str(i)).write_text("0000:" * 7 + "0000\n")
    for i, gid, kind in gids:
        (port / "gids" / str(i)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
        (port / "gid_attrs" / "ndevs" / str(i)).write_text("eth0\n")
    return str(root)


def test_find_devices_reads_ports_and_nonzero_gids(tmp_path) -> None:
    root = _sysfs(tmp_path, gids=((0, LL, "IB/RoCE v1"), (1, LL, "RoCE v2"), (3, V4, "RoCE v2")))
    (dev,) = find_devices(root)
    (port,) = dev.ports
    assert (dev.name, port.num, port.state, port.link_layer) == ("rxe0", 1, "ACTIVE", "Ethernet")
    assert [(g.index, g.kind, g.ip()) for g in port.gids] == [
        (0, "IB/RoCE v1", ""), (1, "RoCE v2", ""), (3, "RoCE v2", "198.18.0.1")
    ]  # fmt: skip
    assert find_devices(str(tmp_path / "absent")) == []


def test_choose_port_takes_the_roce_v2_gid_of_the_data_address(tmp_path) -> None:
    devs = find_devices(_sysfs(tmp_path, gids=((1, LL, "RoCE v2"), (3, V4, "RoCE v2"))))
    assert choose_port(devs, RdmaOptions(), "198.18.0.1") == Choice("rxe0", 1, 3, "Ethernet")
    with pytest.raises(NoRdmaDevice, match=r"carries the data address 10\.0\.0\.9"):
        choose_port(devs, RdmaOptions(), "10.0.0.9")
    named = choose_port(devs, RdmaOptions(device="rxe0"), "10.0.0.9")  # named: its v2 GID
    assert named.gid_index == 3
    assert choose_port(devs, RdmaOptions(device="rxe0", gid_index=1), "x").gid_index == 1
    with pytest.raises(NoRdmaDevice, match="'mlx5_0' not found \\(have rxe0\\)"):
        choose_port(devs, RdmaOptions(device="mlx5_0"), "198.18.0.1")


def test_inactive_port_and_no_device_are_one_line_errors(tmp_path) -> None:
    devs = find_devices(_sysfs(tmp_path, state="1: DOWN", gids=((3, V4, "RoCE v2"),)))
    with pytest.raises(TransportError, match="port 1 is DOWN, not ACTIVE"):
        choose_port(devs, RdmaOptions(), "198.18.0.1")
    with pytest.raises(NoRdmaDevice) as info:
        choose_port([], RdmaOptions(), "127.0.0.1")
    assert "no RDMA device found" in str(info.value) and "softroce up --netdev IF" in str(
        info.value
    )
    assert "does not exist" in no_device_message(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    assert "is empty" in no_device_message(str(tmp_path / "empty"))


def _facts(src, dst, qpn, psn, mtu=4096, slots=()):
    return QpFacts(src=src, dst=dst, qpn=qpn, psn=psn, gid=gid_hex(V4), lid=5, rkey=9,
                   address=0x10000, length=4096, mtu=mtu, slots=list(slots))  # fmt: skip


def test_qp_walks_init_rtr_rts_with_the_peer_facts() -> None:
    mine, peer = _facts(0, 1, 17, 100, mtu=4096), _facts(1, 0, 42, 777, mtu=1024)
    roce = Choice("rxe0", 1, 3, "Ethernet")
    assert init_attrs(1) == {"qp_state": "INIT", "pkey_index": 0, "port_num": 1,
                             "access": "remote_write"}  # fmt: skip
    r = rtr_attrs(mine, peer, roce, RdmaOptions())
    assert (r["qp_state"], r["dest_qp_num"], r["rq_psn"], r["path_mtu"]) == ("RTR", 42, 777, 1024)
    assert (r["is_global"], r["dgid"], r["sgid_index"], r["dlid"]) == (1, peer.gid, 3, 0)
    ib = rtr_attrs(mine, peer, Choice("mlx5_0", 1, 0, "InfiniBand"), RdmaOptions(mtu=512))
    assert (ib["is_global"], ib["dlid"], ib["path_mtu"]) == (0, 5, 512)
    s = rts_attrs(mine, RdmaOptions(timeout=12, retry=5))
    assert (s["qp_state"], s["sq_psn"], s["timeout"], s["retry_cnt"]) == ("RTS", 100, 12, 5)


def test_the_traffic_class_goes_into_the_grh_and_the_conditions() -> None:
    mine, peer = _facts(0, 1, 17, 100), _facts(1, 0, 42, 777)
    roce = Choice("rxe0", 1, 3, "Ethernet")
    assert rtr_attrs(mine, peer, roce, RdmaOptions())["traffic_class"] == 0  # verbs' default
    assert rtr_attrs(mine, peer, roce, RdmaOptions(traffic_class=106))["traffic_class"] == 106
    held = rdma_conditions(RdmaOptions(qps=4, traffic_class=106),
                           [roce, roce, Choice("mlx5_1", 1, 0, "InfiniBand")])  # fmt: skip
    assert held.nics == {
        "rxe0": {"rdma_qps": "4", "rdma_traffic_class": "106"},
        "mlx5_1": {"rdma_qps": "4"},  # InfiniBand: no GRH on the wire, no traffic class
    }


def test_mtu_gid_and_status_helpers() -> None:
    assert path_mtu(4096, 2048) == 2048 and path_mtu(4096, 4096, 1024) == 1024
    assert path_mtu(1500, 9000) == 1024  # an Ethernet MTU rounds down to an IB MTU
    assert gid_text(gid_hex(V4)) == V4 and gid_hex("::ffff:198.18.0.1") == gid_hex(V4)
    assert wc_status_name(10) == "remote access error" and wc_status_name(12).startswith(
        "transport retry"
    )
    assert wc_status_name(99) == "status 99"


def test_immediates_round_trip() -> None:
    for step, it in ((0, 0), (12345, 7), ((1 << 21) - 1, 1023), (5, 1024)):
        kind, bits, s = decode_imm(imm_data(step, it))
        assert (kind, bits, s) == ("data", it & 1023, step)
        assert not imm_data(step, it) & IMM_READY
    # a credit: (program low bits, use); program 0's is the encoding of before op lists
    assert decode_imm(imm_ready(9)) == ("ready", 0, 9) and imm_ready(9) == IMM_READY | 9
    assert decode_imm(imm_ready(70_000, 1026)) == ("ready", 2, 70_000)
    with pytest.raises(TransportError):
        imm_ready(1 << 21)
    with pytest.raises(TransportError):
        imm_data(1 << 21, 0)


def test_segments_cover_a_step_exactly() -> None:
    assert segments(0, 4096) == [(0, 0)]
    for n in (1, 4096, 4097, 10**6 + 3):
        segs = segments(n, 4096)
        assert sum(ln for _, ln in segs) == n and all(0 < ln <= 4096 for _, ln in segs)
        assert [o for o, _ in segs] == list(range(0, n, 4096))


def test_options_are_checked() -> None:
    check_options(RdmaOptions())
    for bad, msg in (
        (RdmaOptions(mode="read"), "mode"),
        (RdmaOptions(window=0), "window"),
        (RdmaOptions(segment=10), "segment"),
        (RdmaOptions(mtu=1500), "MTU"),
        (RdmaOptions(qps=17), "queue pairs per connection 17 outside 1..16"),
        (RdmaOptions(traffic_class=256), "traffic class 256 outside 0..255"),
        (RdmaOptions(traffic_class=-1), "traffic class -1 outside 0..255"),
        (RdmaOptions(timeout=32), "ACK timeout exponent 32 outside 0..31"),
        (RdmaOptions(retry=8), "retry count 8 outside 0..7"),
    ):
        with pytest.raises(TransportError, match=msg):
            check_options(bad)  # fmt: skip


def _plans(spec, n):
    prog = builtin_program(spec)
    placement = [f"a{r}" for r in range(n)]
    out = {}
    for r in range(n):
        ap = plan_agent(f"a{r}", [prog], placement, Limits())
        out[r] = {p: rp[r] for p, rp in enumerate(ap.rank_plans) if r in rp}
    return out


def test_landing_slots_pair_every_send_with_its_receive() -> None:
    spec = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=3, size=3 * 4096,
                       chunks=2)  # fmt: skip
    plans = _plans(spec, 3)
    # rank 1 receives from rank 0; rank 0's sends to 1 land in rank 1's slots
    slots = recv_slots(plans[1], 0)
    assert slots and all(p == 0 for p, *_ in slots)
    facts = _facts(1, 0, 1, 1, slots=slots)
    targets = send_targets(plans[0], 1, facts)
    steps0 = plans[0][0].steps
    sends = [i for i, st in enumerate(steps0) if st.op == 0 and plans[0][0].peer_global[i] == 1]
    assert sorted(i for _, i in targets) == sends
    for (_, i), (pstep, addr) in targets.items():
        st1 = plans[1][0].steps[pstep]
        assert st1.op == 1 and st1.nbytes == steps0[i].nbytes and addr >= facts.address
    other = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=3, size=3 * 8192,
                        chunks=2)  # fmt: skip
    with pytest.raises(TransportError, match="matches no receive"):
        send_targets(_plans(other, 3)[0], 1, facts)  # programs differ between the two ends


def test_exchange_over_a_socket_pair_and_a_wrong_peer() -> None:
    a, b = socket.socketpair()
    mine, theirs = _facts(0, 1, 17, 100, slots=[(0, 0, 0, 3, 0, 64)]), _facts(1, 0, 42, 777)
    got = {}
    t = threading.Thread(target=lambda: got.update(b=exchange_facts([(b, theirs)], 2.0)))
    t.start()
    (peer,) = exchange_facts([(a, mine)], 2.0)
    t.join()
    assert peer == theirs and got["b"] == [mine]
    c, d = socket.socketpair()
    errs = []

    def wrong_side() -> None:
        try:
            exchange_facts([(d, _facts(2, 0, 1, 1))], 2.0)
        except TransportError as exc:
            errs.append(exc)

    t = threading.Thread(target=wrong_side)
    t.start()
    with pytest.raises(TransportError, match="expected facts of rank 1 for 0, got 2 for 0"):
        exchange_facts([(c, mine)], 2.0)
    t.join()
    assert errs  # and the other side refuses ours too
    e, f = socket.socketpair()
    with pytest.raises(TransportError, match="exchange with rank 1 failed"):
        exchange_facts([(e, mine)], 0.1)  # silent peer: bounded
    for s in (a, b, c, d, e, f):
        s.close()
