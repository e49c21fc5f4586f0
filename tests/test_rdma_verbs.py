"""The verbs layer's pyverbs structs, built for real from the pure attribute dicts (no device).

Needs a pyverbs (this CI machine: Debian's python3-pyverbs); QPAttr, AHAttr, GID, SGE and WRs
are plain structs, so what the QP transitions and work requests would carry is checked here
even though no device exists to send them.
"""

from __future__ import annotations

import msgspec
import pytest

from genie.errors import TransportError
from genie.wire.messages import QpFacts, RdmaOptions
from genie_agent.dataplane.rdma_conn import Choice, gid_text, init_attrs, rtr_attrs, rts_attrs


def _pv():
    from genie_agent.dataplane.rdma import load_pyverbs

    try:
        return load_pyverbs()
    except TransportError as exc:
        pytest.skip(f"load_pyverbs failed: {exc}")


def _facts(src, dst, qpn, psn, mtu=4096):
    return QpFacts(src=src, dst=dst, qpn=qpn, psn=psn, gid="fe80" + "0" * 24 + "00000a01",
                   lid=0, rkey=9, address=0x1000, length=64, mtu=mtu)  # fmt: skip


def test_transitions_carry_the_pure_attributes() -> None:
    from genie_agent.dataplane.rdma import init_qpattr, rtr_qpattr, rts_qpattr

    pv = _pv()
    e = pv.enums
    choice = Choice("rxe0", 1, 3, "Ethernet")
    mine, peer = _facts(0, 1, 17, 100), _facts(1, 0, 42, 777, mtu=1024)
    opts = RdmaOptions()
    a = init_qpattr(pv, init_attrs(1))
    assert (a.qp_state, a.port_num, a.pkey_index) == (e.IBV_QPS_INIT, 1, 0)
    assert a.qp_access_flags == e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    r = rtr_qpattr(pv, rtr_attrs(mine, peer, choice, opts))
    assert (r.qp_state, r.dest_qp_num, r.rq_psn) == (e.IBV_QPS_RTR, 42, 777)
    assert r.path_mtu == e.IBV_MTU_1024  # the smaller of both ends
    ah = r.ah_attr
    assert (ah.is_global, ah.sgid_index, ah.port_num, ah.hop_limit) == (1, 3, 1, 64)
    assert str(ah.dgid) == gid_text(peer.gid)
    s = rts_qpattr(pv, rts_attrs(mine, opts))
    assert (s.qp_state, s.sq_psn, s.timeout, s.retry_cnt, s.rnr_retry) == (
        e.IBV_QPS_RTS, 100, 14, 7, 7
    )  # fmt: skip


def test_every_lane_of_a_connection_carries_the_traffic_class_in_its_grh() -> None:
    """VerbsRank.connect on stand-in queue pairs: the RTR attributes each lane gets (pyverbs'
    own QPAttr/AHAttr/GlobalRoute) carry the job's traffic class."""
    from types import SimpleNamespace

    from genie_agent.dataplane.rdma import VerbsRank

    pv = _pv()

    class Qp:
        def __init__(self, n):
            self.qp_num, self.rtr, self.rts = n, None, None

        def to_rtr(self, attr):
            self.rtr = attr

        def to_rts(self, attr):
            self.rts = attr

    for tc, want in ((None, 0), (106, 106), (255, 255)):
        opts = RdmaOptions() if tc is None else RdmaOptions(qps=3, traffic_class=tc)
        vr = object.__new__(VerbsRank)  # no device: only what connect touches
        vr.pv, vr.opts, vr.rkeys = pv, opts, {}
        vr.dev = SimpleNamespace(choice=Choice("rxe0", 1, 1, "Ethernet"))
        vr.qps = {(1, k): Qp(0x100 + k) for k in range(3)}
        mine, peer = _facts(0, 1, 0x100, 5), _facts(1, 0, 0x200, 9)
        vr.connect(mine, msgspec.structs.replace(peer, qpns=[0x200, 0x201, 0x202]))
        for k, qp in vr.qps.items():
            ah = qp.rtr.ah_attr
            assert (qp.rtr.dest_qp_num, ah.is_global, ah.sgid_index) == (0x200 + k[1], 1, 1)
            assert ah.traffic_class == want


def test_work_requests_with_and_without_data() -> None:
    from genie_agent.dataplane.rdma import recv_wr, send_wr

    pv = _pv()
    e = pv.enums
    sge = pv.wr.SGE(0x10000, 4096, 77)
    w = send_wr(pv, 5, e.IBV_WR_RDMA_WRITE_WITH_IMM, sge, 0x12345, rdma=(9, 0x2000))
    assert (w.wr_id, w.opcode, w.num_sge, w.imm_data) == (5, e.IBV_WR_RDMA_WRITE_WITH_IMM, 1,
                                                          0x12345)  # fmt: skip
    assert w.send_flags == e.IBV_SEND_SIGNALED
    credit = send_wr(pv, 6, e.IBV_WR_SEND_WITH_IMM, None, 1 << 31 | 3)
    assert credit.num_sge == 0 and credit.imm_data == 1 << 31 | 3
    r = recv_wr(pv, (1 << 63) | 7, None)
    assert r.num_sge == 0 and r.wr_id == (1 << 63) | 7
    assert recv_wr(pv, 8, sge).num_sge == 1


def test_the_device_objects_have_the_methods_the_verbs_layer_calls() -> None:
    pv = _pv()
    calls = {
        pv.device.Context: ("query_port", "query_gid", "close"),
        pv.pd.PD: ("close",),
        pv.cq.CQ: ("poll", "req_notify", "ack_events", "close"),
        pv.cq.CompChannel: ("get_cq_event", "close"),
        pv.qp.QP: ("to_init", "to_rtr", "to_rts", "modify", "post_send", "post_recv", "qp_num"),
        pv.mr.MR: ("buf", "lkey", "rkey", "close"),
        pv.cq.WC: ("wr_id", "status", "imm_data", "byte_len", "vendor_err"),
    }
    missing = [f"{c.__name__}.{m}" for c, ms in calls.items() for m in ms if not hasattr(c, m)]
    assert not missing
    e = pv.enums
    for name in ("IBV_PORT_ACTIVE", "IBV_QPS_ERR", "IBV_QP_STATE", "IBV_SEND_SIGNALED"):
        assert hasattr(e, name), name
