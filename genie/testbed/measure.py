"""Measure a netns testbed: TCP rates between hosts with the bounded rate probe
(``measure_flows``), and the bytes every link has carried (``link_tx_bytes``: the sending
end's interface counters, read in its namespace)."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence

import msgspec

from genie.errors import TestbedError
from genie.testbed.model import Testbed
from genie.testbed.netns import Runner, netns_exec, run_command

PROBE = [sys.executable, "-m", "genie.testbed.rateprobe"]


class Flow(msgspec.Struct, frozen=True):
    """One measured flow: bytes received, first and last byte times (monotonic clock, s)."""

    src: str
    dst: str
    bytes: int
    first: float
    last: float

    @property
    def rate(self) -> float:
        """Bytes/s from the first to the last byte."""
        return self.bytes / (self.last - self.first)


def aggregate_rate(flows: Sequence[Flow]) -> float:
    """Total bytes over the span from the earliest first byte to the latest last byte."""
    return sum(f.bytes for f in flows) / (max(f.last for f in flows) - min(f.first for f in flows))


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            return ""
        return proc.stdout.readline().strip()
    finally:
        sel.close()


def _popen(netns: str, argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        netns_exec(netns, argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def measure_flows(
    tb: Testbed,
    pairs: Sequence[tuple[str, str]],
    nbytes: int,
    base_port: int = 45000,
    deadline_s: float = 30.0,
) -> list[Flow]:
    """Run one TCP flow of ``nbytes`` per (src, dst) host pair, all started together."""
    procs: list[subprocess.Popen[str]] = []
    try:
        receivers = []
        for i, (_, dst) in enumerate(pairs):
            h = tb.host(dst)
            argv = [*PROBE, "recv", h.data_addr, str(base_port + i), str(deadline_s)]
            receivers.append(_popen(h.netns or "", argv))
        procs += receivers
        for r, (_, dst) in zip(receivers, pairs, strict=True):
            if _readline(r, 10.0) != "ready":
                raise TestbedError(f"rate probe receiver in {dst} did not start")
        senders = []
        for i, (src, dst) in enumerate(pairs):
            argv = [*PROBE, "send", tb.host(dst).data_addr, str(base_port + i), str(nbytes),
                    str(deadline_s), "wait-go"]  # fmt: skip
            senders.append(_popen(tb.host(src).netns or "", argv))
        procs += senders
        for s, (src, dst) in zip(senders, pairs, strict=True):
            if _readline(s, 10.0) != "connected":
                raise TestbedError(f"rate probe sender {src}->{dst} could not connect")
        for s in senders:
            assert s.stdin is not None
            s.stdin.write("go\n")
            s.stdin.flush()
        end = time.monotonic() + deadline_s + 5
        flows = []
        for r, (src, dst) in zip(receivers, pairs, strict=True):
            line = _readline(r, max(0.1, end - time.monotonic()))
            try:
                got = json.loads(line)
            except json.JSONDecodeError:
                raise TestbedError(f"rate probe {src}->{dst} gave no result: {line!r}") from None
            if got["bytes"] < nbytes or got["seconds"] <= 0:
                raise TestbedError(f"rate probe {src}->{dst} got {got['bytes']} of {nbytes} B")
            flows.append(Flow(src, dst, got["bytes"], got["first"], got["last"]))
        return flows
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(timeout=5)


def link_tx_bytes(tb: Testbed, runner: Runner = run_command) -> dict[str, int]:
    """Bytes each direction of every link of ``tb`` has sent so far, by topology link name
    (``a->b``: the transmit counter of ``a``'s interface on that link)."""
    from genie.testbed.netns_plan import link_ports

    stats: dict[str, dict[str, int]] = {}
    out: dict[str, int] = {}
    for i, ends in link_ports(tb).items():
        lk = tb.links[i]
        for port, (a, b) in zip(ends, ((lk.a, lk.b), (lk.b, lk.a)), strict=True):
            if port.netns not in stats:
                res = runner(["ip", "-j", "-s", "-n", port.netns, "link", "show"], None)
                if res.returncode != 0:
                    raise TestbedError(f"ip link in {port.netns} failed: {res.stderr.strip()}")
                stats[port.netns] = {
                    d["ifname"]: int(d["stats64"]["tx"]["bytes"]) for d in json.loads(res.stdout)
                }
            out[f"{a}->{b}"] = stats[port.netns][port.ifname]
    return out
