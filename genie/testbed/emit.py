"""Write a Testbed as TOML text that ``loads_testbed`` reads back to an equal Testbed."""

from __future__ import annotations

import json

from genie.collectives.topology import Routing
from genie.testbed.model import DEFAULT_NETNS_PREFIX, RdmaSettings, TcpSettings, Testbed
from genie.wire.liveness import MISSED_BEATS_LIMIT


def _str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _rate(bytes_per_s: float) -> str:
    """A rate with its unit: ``"10gbit"`` when exact, else ``"<bits>bit"`` (bits/s)."""
    bits = bytes_per_s * 8
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale and float(int(bits / scale)) * scale == bits:
            return _str(f"{int(bits / scale)}{unit}")
    if bits == int(bits):
        return _str(f"{int(bits)}bit")
    return _str(f"{bits!r}bit")


def dumps_testbed(tb: Testbed) -> str:
    """TOML text of ``tb`` in expanded form (explicit hosts, switches and links)."""
    out = [f"# genie testbed {tb.name!r}, written by genie", "", "[testbed]"]
    out.append(f"name = {_str(tb.name)}")
    out.append(f"kind = {_str(tb.kind)}")
    out.append(f"transport = {_str(tb.transport)}")
    if tb.model:
        out.append(f"model = {_str(tb.model)}")
    if tb.rates != "line":
        out.append(f"rates = {_str(tb.rates)}")
    if tb.kind == "netns" and tb.netns_prefix != DEFAULT_NETNS_PREFIX:
        out.append(f"netns_prefix = {_str(tb.netns_prefix)}")
    if tb.missed_beats != MISSED_BEATS_LIMIT:
        out.append(f"missed_beats = {tb.missed_beats}")
    if tb.tcp != TcpSettings():
        t = tb.tcp
        out += ["", "[tcp]", f"congestion_control = {_str(t.congestion_control)}"]
        out += [f"ecn = {_str(t.ecn)}"]
        out += [f"slow_start_after_idle = {'true' if t.slow_start_after_idle else 'false'}"]
        if t.buffer_max is not None:
            out += [f"buffer_max = {t.buffer_max}"]
    if tb.rdma != RdmaSettings():
        rd = tb.rdma
        out += ["", "[rdma]", f"qps_per_connection = {rd.qps_per_connection}"]
        if rd.stall_s is not None:
            out += [f"stall_s = {rd.stall_s!r}"]
        if rd.traffic_class is not None:
            out += [f"traffic_class = {rd.traffic_class}"]
    if tb.routing != Routing():
        r = tb.routing
        out += ["", "[routing]", f"policy = {_str(r.policy)}", f"channels = {r.channels}"]
        out += [f"qps = {r.qps}", f"seed = {r.seed}"]
    out += ["", "[intra_host]"]
    out.append(f"bandwidth = {_rate(tb.intra_host.bandwidth)}")
    out.append(f"latency = {tb.intra_host.latency!r}")
    for h in tb.hosts:
        out += ["", "[[hosts]]", f"name = {_str(h.name)}", f"control = {_str(h.control)}"]
        out.append(f"data_addr = {_str(h.data_addr)}")
        out.append(f"ranks = {h.ranks}")
        if h.nic is not None:
            out.append(f"nic = {_str(h.nic)}")
        if h.rdma_device is not None:
            out.append(f"rdma_device = {_str(h.rdma_device)}")
        if h.rank_nics:
            out.append(f"rank_nics = [{', '.join(str(k) for k in h.rank_nics)}]")
        if h.faults:
            out.append("faults = true")
        for n in h.nics:
            out += ["", "[[hosts.nics]]", f"name = {_str(n.name)}"]
            if tb.kind != "netns":
                out.append(f"data_addr = {_str(n.data_addr)}")
            for key in ("device", "rdma_device"):
                if getattr(n, key) is not None:
                    out.append(f"{key} = {_str(getattr(n, key))}")
    for s in tb.switches:
        out += ["", "[[switches]]", f"name = {_str(s.name)}"]
    for lk in tb.links:
        out += ["", "[[links]]", f"a = {_str(lk.a)}", f"b = {_str(lk.b)}"]
        out.append(f"rate = {_rate(lk.rate)}")
        out.append(f"mtu = {lk.mtu}")
        if lk.queue_limit is not None:
            out.append(f"queue_limit = {lk.queue_limit}")
        if lk.latency:
            out.append(f"latency = {lk.latency!r}")
        if lk.jitter:
            out.append(f"jitter = {lk.jitter!r}")
        if lk.loss:
            out.append(f"loss = {lk.loss!r}")
    return "\n".join(out) + "\n"
