"""A peer's text never reaches a terminal or the store raw or unbounded (issue 31 item 3).

A fake agent (a bare ZeroMQ socket speaking the protocol) answers a real ``genie bench`` with a
1 MB hostname full of terminal escapes and fails the run with an Error of 100 kB carrying clear
screen, an OSC title, BEL and CR. Before the fix the bench printed them raw and whole, and the
store kept (and ``genie runs show`` replayed) all of it.
"""

from __future__ import annotations

import sqlite3

import msgspec
import pytest
from test_hardening_store import FakeAgent

from genie import __version__, cli
from genie.api.benchmark import BenchSpec, bench
from genie.errors import RuntimeFault
from genie.store import RunStore
from genie.testbed import dumps_testbed, loopback_testbed
from genie.wire import messages as p
from genie.wire.text import MAX_NAME, MAX_TEXT, clean

ESCAPES = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x07\r"
BAD = ("\x1b", "\x07", "\r", "\x9b")


class EvilAgent(FakeAgent):
    """Claims with hostile host facts, fails every Go with a hostile Error."""

    def _answer(self, msg: p.Msg) -> p.Msg | None:
        if isinstance(msg, p.Hello):
            facts = p.HostFacts(
                hostname=ESCAPES + "h" * 1_000_000,
                platform=ESCAPES,
                nics=[{"name": ESCAPES * 10, "addrs": [ESCAPES] * 5000}],
            )
            return p.HelloReply(
                agent="h0", version=__version__ + ESCAPES, protocol=p.PROTOCOL_VERSION,
                facts=facts, data_addr="127.0.0.1", data_port=1, session="f" * 32,
            )  # fmt: skip
        if isinstance(msg, p.Go):
            text = ESCAPES + "x" * 100_000 + ESCAPES
            return p.Error(job=msg.job, epoch=msg.epoch, code="run", message=text)
        return super()._answer(msg)


def test_clean_escapes_controls_and_bounds_length() -> None:
    out = clean("a" + ESCAPES + "\x9b\u202eb", 100)
    assert not any(c in out for c in BAD) and "\\x1b[2J" in out and "\\u202e" in out
    long = clean("y" * 10_000)
    assert len(long) < MAX_TEXT + 40 and long.endswith("(8000 more characters cut)")
    assert clean("plain text: 1.5 GB/s") == "plain text: 1.5 GB/s"


def test_decode_sanitises_a_peers_text() -> None:
    err = p.decode(p.encode(p.Error(code="run", message=ESCAPES * 20_000)))
    assert isinstance(err, p.Error) and len(err.message) < MAX_TEXT + 40
    assert not any(c in err.message for c in BAD)


def test_decode_sanitises_the_conditions_a_prepared_reply_states() -> None:
    cond = p.WireConditions(
        congestion=[ESCAPES + "cubic"],
        kernel=ESCAPES * 1000,
        sysctl={ESCAPES: ESCAPES * 100},
        nics={"eth0" + ESCAPES: {"qdisc": ESCAPES * 50, "rdma_traffic_class": "106"}},
    )
    got = p.decode(p.encode(p.Prepared(job="j1", ranks=[0], connections=1, setup_s=0.1,
                                       conditions=cond)))  # fmt: skip
    assert isinstance(got, p.Prepared)
    text = msgspec.json.encode(got.conditions).decode()
    assert not any(c in text for c in BAD) and len(got.conditions.kernel) < MAX_NAME + 40
    assert "cubic" in got.conditions.congestion[0]
    (nic,) = got.conditions.nics.values()
    assert nic["rdma_traffic_class"] == "106"  # plain values pass unchanged


def test_a_hostile_agents_text_reaches_neither_terminal_nor_store(tmp_path, capsys) -> None:
    fake = EvilAgent(lambda go: None)
    try:
        tb = loopback_testbed(1, base_port=fake.port, ranks_per_host=2)
        path = tmp_path / "fake.toml"
        path.write_text(dumps_testbed(tb))
        store = tmp_path / "runs.sqlite"
        rc = cli.main(
            ["bench", "--testbed", str(path), "--sizes", "4096", "--iters", "1",
             "--store", str(store)]
        )  # fmt: skip
    finally:
        fake.close()
    out, err = capsys.readouterr()
    printed = len(out) + len(err)
    assert rc != 0 and "agent h0" in err
    assert not any(c in out + err for c in BAD), repr(err[:300])  # was: the raw escapes
    assert len(out) + len(err) < 3 * MAX_TEXT  # was: all 100 kB
    db = sqlite3.connect(store)
    (error, facts) = db.execute("SELECT error, host_facts FROM runs").fetchone()
    db.close()
    assert not any(c in error for c in BAD) and len(error) < 3 * MAX_TEXT  # was: 100,093 chars
    host = msgspec.json.decode(facts)["h0"]
    assert len(host["hostname"]) < MAX_NAME + 40 and "\\x1b" in host["hostname"]  # was: 1 MB
    assert len(facts) < 200 * MAX_NAME
    rc = cli.main(["runs", "list", "--store", str(store)])
    shown, err = capsys.readouterr()
    assert not any(c in shown + err for c in BAD)
    with capsys.disabled():
        print(f"\nbench against a hostile agent: {printed} characters printed, error stored: "
              f"{len(error)} characters, host facts stored: {len(facts)} characters")  # fmt: skip


def _zero_length(go: p.Go) -> p.Result:
    n = go.iters + go.warmup
    t = [go.start_at + go.offset + 1000 + i * 10_000 for i in range(n)]
    rr = [p.RankResult(rank=r, start=t, end=t) for r in (0, 1)]
    return p.Result(job=go.job, epoch=go.epoch, program=go.program, warmup=go.warmup, ranks=rr)


def test_zero_length_iterations_from_a_peer_are_refused(tmp_path) -> None:
    """A weaker point of issue 31: a Result whose iterations take 0 ns gave time 0.0 and
    busbw inf, printed and stored."""
    fake = FakeAgent(_zero_length)
    try:
        tb = loopback_testbed(1, base_port=fake.port, ranks_per_host=2)
        path = tmp_path / "fake.toml"
        path.write_text(dumps_testbed(tb))
        store = tmp_path / "runs.sqlite"
        cfg = BenchSpec(
            testbed=str(path), sizes=[4096], iters=2, warmup=1, store=str(store), progress=False
        )
        with pytest.raises(RuntimeFault, match=r"malformed result: iteration 0 .* took 0 ns"):
            bench(cfg)  # was: rows with time 0.0 and busbw inf
    finally:
        fake.close()
    with RunStore(store) as st:
        (info,) = st.list_runs()
    assert info.status == "failed" and info.instances == 0


def test_an_older_stores_raw_text_is_shown_escaped(tmp_path, capsys) -> None:
    """A store written before the sanitiser holds a peer's raw escapes: they are shown escaped
    and bounded."""
    store = tmp_path / "old.sqlite"
    with RunStore(store) as st:
        rid = st.start_run("genie bench", host_facts={"h0": {"hostname": ESCAPES + "h" * 10_000}})
        st.finish_run(rid, "failed", "agent h0 during run: " + ESCAPES + "x" * 100_000)
    for argv in (["runs", "show", rid], ["runs", "list"]):
        rc = cli.main([*argv, "--store", str(store)])
        out, err = capsys.readouterr()
        assert rc == 0 and not any(c in out + err for c in BAD), repr(out[:300])  # was: raw
        assert len(out) < 60_000  # was: all 100 kB
    with RunStore(store) as st:
        info = st.run(rid)
    assert "\\x1b[2J" in info.error and len(info.host_facts["h0"]["hostname"]) < MAX_NAME + 40
