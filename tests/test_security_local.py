"""Security with real agent processes: CURVE on the control channel, job tokens on data ports."""

from __future__ import annotations

import socket
import stat
import time

import pytest

from genie.collectives import build_program
from genie.controller.faults import HANDSHAKE_REFUSED
from genie.controller.local import LocalCluster, open_controller
from genie.controller.session import Timeouts
from genie.errors import AgentRefused, GenieError, RuntimeFault, UsageError
from genie.keys import init_keys, load_pair, trusted_controllers
from genie_agent.dataplane.tcp import HANDSHAKE, HANDSHAKE_MAGIC

HB = 0.2


def _timeouts() -> Timeouts:
    return Timeouts(heartbeat_s=HB, register_s=3.0, abort_s=1.0)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    init_keys(d)
    return d


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, keys):
    cl = LocalCluster.start(2, tmp_path_factory.mktemp("cl"), heartbeat_s=HB, keys_dir=keys)
    try:
        yield cl
    finally:
        cl.stop()


def _log(cluster, i: int = 0) -> str:
    return (cluster.dir / f"agent-{cluster.testbed.hosts[i].name}.log").read_text()


def test_keys_init_makes_private_secrets_and_refuses_to_overwrite(tmp_path) -> None:
    pairs = init_keys(tmp_path, ["h7"])
    assert set(pairs) == {"controller", "agent", "agent-h7"}
    for name in pairs:
        mode = stat.S_IMODE((tmp_path / f"{name}.secret").stat().st_mode)
        assert mode == 0o600
        assert load_pair(tmp_path, name) == pairs[name]
    assert trusted_controllers(tmp_path) == {pairs["controller"].public}
    with pytest.raises(UsageError, match="already exists"):
        init_keys(tmp_path)
    (tmp_path / "agent.secret").chmod(0o644)
    with pytest.raises(UsageError, match="readable by others"):
        load_pair(tmp_path, "agent")
    (tmp_path / "controller.public").write_text("short\n")
    with pytest.raises(UsageError, match="not a CURVE key"):
        trusted_controllers(tmp_path)


def test_trusted_controller_runs_a_job(cluster, keys) -> None:
    ctl = open_controller(cluster.testbed, timeouts=_timeouts(), keys_dir=str(keys))
    try:
        ctl.connect()
        names = [h.name for h in cluster.testbed.hosts]
        ctl.prepare([build_program("all_reduce", "ring", 2, 4096, size_convention="nccl")], names)
        assert len(ctl.run(0, iters=2).instances) == 2
        ctl.release()
    finally:
        ctl.close()
        ctl.t.close()
    assert "CURVE" in _log(cluster)


def test_controller_with_unknown_key_is_refused_and_logged(cluster, keys, tmp_path) -> None:
    # an intruder has the agents' public key (it is public) but its own controller pair
    init_keys(tmp_path)
    (tmp_path / "agent.public").write_bytes((keys / "agent.public").read_bytes())
    intruder = load_pair(tmp_path, "controller").public
    ctl = open_controller(cluster.testbed, timeouts=_timeouts(), keys_dir=str(tmp_path))
    t0 = time.monotonic()
    try:
        with pytest.raises(AgentRefused, match="refused this controller") as info:
            ctl.connect()
    finally:
        ctl.close()
        ctl.t.close()
    print(f"\nunknown key refused after {(time.monotonic() - t0) * 1e3:.0f} ms: {info.value}")
    deadline = time.monotonic() + 2
    while "auth: refused" not in _log(cluster) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert f"unknown CURVE key {intruder[:8].decode()}" in _log(cluster)


def test_a_refusal_seen_before_the_hello_is_still_a_refusal(cluster, keys, tmp_path) -> None:
    # the channel learns of the refusal (and libzmq drops the connection) before any Hello is
    # sent: the send fails, and the error is still the refusal, not "cannot send"
    init_keys(tmp_path)
    (tmp_path / "agent.public").write_bytes((keys / "agent.public").read_bytes())
    ctl = open_controller(cluster.testbed, timeouts=_timeouts(), keys_dir=str(tmp_path))
    names = {h.name for h in cluster.testbed.hosts}
    try:
        deadline = time.monotonic() + 5
        while set(ctl.t.refused) != names and time.monotonic() < deadline:
            ctl.t.recv(0.02)
        settle = time.monotonic() + 0.3
        while time.monotonic() < settle:  # the socket processes the dropped connections
            ctl.t.recv(0.02)
        assert set(ctl.t.refused) == names
        with pytest.raises(AgentRefused, match="refused this controller during hello") as info:
            ctl.connect()
    finally:
        ctl.close()
        ctl.t.close()
    assert info.value.cause == HANDSHAKE_REFUSED and info.value.agent in names


def test_controller_without_keys_gets_nothing_from_a_curve_agent(cluster) -> None:
    ctl = open_controller(cluster.testbed, timeouts=Timeouts(register_s=1.0), keys_dir="")
    try:
        # refused at the handshake, or (before the CURVE handshake fails) unreachable: never a
        # hello, and the message points at the keys
        with pytest.raises(
            RuntimeFault,
            match=r"refused this controller|timed out|CURVE keys|"
            "cannot send",
        ):
            ctl.connect()
    finally:
        ctl.close()
        ctl.t.close()


def _knock(port: int, payload: bytes, wait: bool = True) -> bytes:
    """Connect to a data port, send ``payload``; return what comes back before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(payload)
        if not wait:
            return b""
        s.settimeout(2)
        try:
            return s.recv(100)
        except (ConnectionResetError, TimeoutError):
            return b"<reset>"


def test_data_port_refuses_outsiders_and_logs_it(cluster, keys) -> None:
    ctl = open_controller(cluster.testbed, timeouts=_timeouts(), keys_dir=str(keys))
    try:
        hello = ctl.connect()
        port = hello[cluster.testbed.hosts[0].name].data_port
        # garbage instead of a handshake
        assert _knock(port, b"GET / HTTP/1.0\r\n\r\n" + b"x" * 40) in (b"", b"<reset>")
        names = [h.name for h in cluster.testbed.hosts]
        ctl.prepare([build_program("all_reduce", "ring", 2, 65536, size_convention="nccl")], names)
        # a well-formed handshake for a rank pair of this job, but without the job's token: it
        # waits aside (a job of that token may come) and never joins this job; it gives up
        fake = HANDSHAKE.pack(HANDSHAKE_MAGIC, b"\x00" * 16, 1, 0, 0, 1)
        _knock(port, fake, wait=False)
        # the job itself is untouched
        out = ctl.run(0, iters=2)
        assert len(out.instances) == 2
        ctl.release()
    finally:
        ctl.close()
        ctl.t.close()
    log = _log(cluster)
    assert "data: refused connection" in log and "bad handshake magic" in log
    assert "closed before a job with its token was set up here" in log


def test_agent_warns_when_listening_beyond_loopback_without_keys(monkeypatch) -> None:
    from genie_agent.daemon import is_loopback, run_agent

    monkeypatch.delenv("GENIE_KEYS", raising=False)
    assert is_loopback("127.0.0.1:5") and is_loopback("[::1]:5") and not is_loopback("10.0.0.1:5")
    lines: list[str] = []
    # 198.18.0.1 is not configured here: the bind fails right after the warning (no traffic)
    with pytest.raises(GenieError):
        run_agent("198.18.0.1:1", "h0", "127.0.0.1", log=lines.append)
    assert any(line.startswith("warning: listening on 198.18.0.1:1 without keys") for line in lines)
    lines.clear()
    with pytest.raises(GenieError):
        run_agent("127.0.0.1:1", "h0", "198.18.0.1", log=lines.append)
    assert not any("warning" in line for line in lines)


def genie_main(argv: list[str]) -> int:
    """Run ``genie keys ...`` through its own parser (as genie.cli does: GenieError -> code)."""
    import argparse
    import sys

    from genie.commands import keys as keys_cmd

    parser = argparse.ArgumentParser(prog="genie")
    keys_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except GenieError as exc:
        print(f"genie: error: {exc}", file=sys.stderr)
        return exc.exit_code


def test_keys_init_cli(tmp_path, capsys) -> None:
    assert genie_main(["keys", "init", "--dir", str(tmp_path / "k"), "--agents", "h0,h1"]) == 0
    out = capsys.readouterr().out
    assert "agent-h1" in out and "GENIE_KEYS" in out
    assert sorted(p.name for p in (tmp_path / "k").glob("*.secret")) == [
        "agent-h0.secret",
        "agent-h1.secret",
        "agent.secret",
        "controller.secret",
    ]
    assert genie_main(["keys", "init", "--dir", str(tmp_path / "k")]) == 2
    assert "already exists" in capsys.readouterr().err
