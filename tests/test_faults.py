"""Link-fault schedules: parsing, resolving on testbeds, the commands, the scheduler's timing,
restore and records (with a fake runner and clock), and the effect on runs. The live run on a
netns testbed is tests/test_faults_netns.py."""

from __future__ import annotations

import threading
import time

import pytest

from genie.cli import main
from genie.faults.effect import fault_effect, fault_windows, trace_events
from genie.faults.netns import FaultScheduler
from genie.faults.schedule import (
    MAX_EVENTS,
    FaultError,
    parse_schedule,
    plan_faults,
    read_schedule,
    resolve_target,
)
from genie.testbed import load_testbed, loads_testbed
from genie.testbed.netns import Result

LEAFSPINE = "testbed/netns-leafspine.toml"  # 2 leaves x 2 hosts, one spine, routed
STAR = """
[testbed]
name = "fstar"
kind = "netns"
netns_prefix = "genie-fq-"
[topology]
shape = "star"
hosts = 3
rate = "200mbit"
"""


def test_parse_the_issue_example() -> None:
    evs = parse_schedule("at 200ms: h2 link rate 100mbit; at 600ms: sw0-p3 down for 50ms")
    assert [(e.at_s, e.target, e.action) for e in evs] == [
        (0.2, "h2", "rate"),
        (0.6, "sw0-p3", "down"),
    ]
    assert evs[0].rate == pytest.approx(100e6 / 8) and evs[0].for_s is None
    assert evs[1].for_s == pytest.approx(0.05)


def test_parse_file_lines_and_comments(tmp_path) -> None:
    f = tmp_path / "faults.txt"
    f.write_text("# a cut\nat 1s: h1 link rate 50mbit for 300ms  # half\n\nat 2s: sw0-p0 up\n")
    evs = parse_schedule(read_schedule(str(f)))
    assert [(e.at_s, e.action, e.for_s) for e in evs] == [(1.0, "rate", 0.3), (2.0, "up", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("at 200ms: h2 link jitter 1ms", "does not emulate jitter"),
        ("at 200ms: h2 link delay 5ms 6ms", "jitter at most the delay"),
        ("at 200ms: h2 link delay 20s", "from 0 to 10 s"),
        ("at 200ms: h2 link loss 60%", "below 50%"),
        ("at 200ms: h2 link loss", "use 'loss PERCENT'"),
        ("at 200xs: h2 link down", "not a duration"),
        ("at 200ms: h2 link rate 100", "needs a unit"),
        ("at 200ms: h2 link rate 100mbit; at 100ms: h1 link down", "time order"),
        ("at 700s: h2 link down", "beyond 600 s"),
        ("at 599s: h2 link down for 2s", "end by 600 s"),
        ("at 1s: h2 link explode", "unknown action"),
        ("h2 link down", "use 'at TIME: TARGET ACTION'"),
        ("at 1s: h2 link up for 1s", "no 'for'"),
        ("", "empty"),
        (";".join(f"at {i}ms: h1 link down" for i in range(MAX_EVENTS + 1)), "at most"),
    ],
)
def test_bad_schedules_are_one_line_errors(text, message) -> None:
    with pytest.raises(FaultError, match=message) as e:
        parse_schedule(text)
    assert "\n" not in str(e.value)


def test_targets_resolve_to_links_and_ends() -> None:
    tb = loads_testbed(STAR)
    t = resolve_target(tb, "h2")
    assert (t.link, t.ports[t.end].ifname, t.ports[t.end].netns) == (2, "eth0", "genie-fq-h2")
    t = resolve_target(tb, "sw0-p1")
    assert (t.link, t.ports[t.end].netns, t.ports[t.end].ifname) == (1, "genie-fq-sw0", "p1")
    t = resolve_target(tb, "h0-sw0")
    assert (t.link, t.ports[t.end].ifname) == (0, "eth0")
    for bad, message in [("h7", "no such link"), ("sw0-p9", "no such link"), ("sw0", "3 links")]:
        with pytest.raises(FaultError, match=message):
            resolve_target(tb, bad)
    ls = load_testbed(LEAFSPINE)
    t = resolve_target(ls, "leaf0-spine0")
    assert {p.netns for p in t.ports} == {"genie-leaf0", "genie-spine0"}


def test_plan_commands_windows_and_restore() -> None:
    tb = loads_testbed(STAR)
    plan = plan_faults(
        tb, parse_schedule("at 100ms: h1 link rate 50mbit for 200ms; at 150ms: sw0-p2 down")
    )
    # rate: both ends' tbf at 50 Mbit/s; restored at 300 ms to the declared 200 Mbit/s
    assert [round(s.at_s, 3) for s in plan.steps] == [0.1, 0.15, 0.3]
    cut, down, back = plan.steps
    assert [c[:3] + c[6:7] for c in cut.commands] == [
        ("tc", "-n", "genie-fq-h1", "eth0"),
        ("tc", "-n", "genie-fq-sw0", "p1"),
    ]
    assert all("50000000bit" in c for c in cut.commands)
    assert back.restore and all("200000000bit" in c for c in back.commands)
    assert down.commands == (("ip", "-n", "genie-fq-sw0", "link", "set", "p2", "down"),)
    # the end of the run restores every touched link: rate and up at both ends
    assert sum("200000000bit" in c for c in plan.restore) == 4
    assert ("ip", "-n", "genie-fq-sw0", "link", "set", "p2", "up") in plan.restore
    assert plan.restore_routes == {}  # a bridge keeps no routes to restore


def test_delay_and_loss_put_netem_over_the_rate_and_restore_the_file() -> None:
    evs = parse_schedule("at 0s: h1 link delay 5ms 1ms for 1s; at 2s: h2 link loss 1.5%")
    assert (evs[0].delay, evs[0].jitter, evs[1].loss) == (0.005, 0.001, 0.015)
    plan = plan_faults(loads_testbed(STAR), evs)
    delay, back, loss = plan.steps
    assert "delay 5.000 ms +- 1.000 ms each way" in delay.label and "loss 1.500%" in loss.label
    # each end: netem at the root (delay, jitter), the link's own tbf under it
    assert len(delay.commands) == 4
    root, child = delay.commands[:2]
    assert root[7:12] == ("root", "handle", "1:", "netem", "limit")
    assert root[-3:] == ("delay", "5000us", "1000us")
    assert child[7:11] == ("parent", "1:1", "handle", "10:") and "200000000bit" in child
    assert any(c[-2:] == ("loss", "1.5%") for c in loss.commands)
    # the window's end and the run's end: plain tbf at the root again (the file has no netem)
    assert back.restore and all(c[7:9] == ("root", "tbf") for c in back.commands)
    assert all(c[:4] != ("tc",) or "netem" not in c for c in plan.restore)
    # a testbed whose links have netem keeps it through a rate fault and its restore
    lat = loads_testbed(STAR.replace('rate = "200mbit"', 'rate = "200mbit"\nlatency = "2ms"'))
    plan = plan_faults(lat, parse_schedule("at 0s: h1 link rate 50mbit for 1s"))
    cut, back = plan.steps
    kinds = [next(w for w in c if w in ("netem", "tbf")) for c in cut.commands]
    assert kinds == ["netem", "tbf", "netem", "tbf"]
    assert "50000000bit" in cut.commands[1] and "delay" in cut.commands[0]
    assert "2000us" in back.commands[0] and "200000000bit" in back.commands[1]


def test_lab_hosts_refuse_delay_and_loss() -> None:
    from genie.faults.lab_plan import plan_lab

    lab = loads_testbed(
        '[testbed]\nname = "lab"\nkind = "static"\n[topology]\nshape = "star"\n'
        'rate = "10gbit"\n[[hosts]]\nname = "a"\ncontrol = "10.0.0.1:7000"\nnic = "e0"\n'
        'faults = true\n[[hosts]]\nname = "b"\ncontrol = "10.0.0.2:7000"\n'
    )
    with pytest.raises(FaultError, match="run on netns testbeds"):
        plan_lab(lab, parse_schedule("at 1s: a-e0 delay 5ms for 1s"))


def test_routed_fabric_restores_the_routes_a_downed_port_lost() -> None:
    tb = load_testbed(LEAFSPINE)
    plan = plan_faults(tb, parse_schedule("at 1s: leaf0-spine0 down for 10ms"))
    assert set(plan.restore_routes) == {"genie-leaf0", "genie-spine0"}
    text = plan.restore_routes["genie-leaf0"]
    assert "route replace" in text and "route add" not in text


def test_lab_testbeds_need_an_opt_in_and_a_named_interface() -> None:
    lab = """
[testbed]
name = "lab"
kind = "static"
[topology]
shape = "star"
rate = "100gbit"
[[hosts]]
name = "a"
control = "10.0.0.1:7000"
nic = "ens1f0"
{extra}
[[hosts]]
name = "b"
control = "10.0.0.2:7000"
"""
    tb = loads_testbed(lab.format(extra=""))
    with pytest.raises(FaultError, match="faults = true"):
        plan_faults(tb, parse_schedule("at 1s: a-ens1f0 down"))
    tb = loads_testbed(lab.format(extra="faults = true"))
    with pytest.raises(FaultError, match="not one the testbed file names"):
        plan_faults(tb, parse_schedule("at 1s: a-eth9 down"))
    with pytest.raises(FaultError, match="for DURATION"):  # a lab link is never left down
        plan_faults(tb, parse_schedule("at 1s: a-ens1f0 down"))
    with pytest.raises(FaultError, match="'up' is not needed"):
        plan_faults(tb, parse_schedule("at 1s: a-ens1f0 up"))
    plan = plan_faults(tb, parse_schedule("at 1s: a-ens1f0 down for 20ms"))
    assert [(f.host, f.iface, f.action, f.for_s) for f in plan.faults] == [
        ("a", "ens1f0", "down", 0.02)
    ]
    # an interface name from the file that could carry shell is refused, never quoted into sh
    bad = loads_testbed(lab.format(extra="faults = true").replace("ens1f0", "x$(reboot)"))
    with pytest.raises(FaultError, match="not a plain interface name"):
        plan_faults(bad, parse_schedule("at 1s: a-x$(reboot) down for 1s"))


class _Clock:
    def now(self) -> int:
        return time.monotonic_ns()


def test_scheduler_applies_on_time_records_and_always_restores() -> None:
    tb = loads_testbed(STAR)
    plan = plan_faults(tb, parse_schedule("at 20ms: h1 link rate 50mbit; at 40ms: h2 link down"))
    ran: list[tuple[float, tuple]] = []
    lock = threading.Lock()
    clock = _Clock()

    def runner(argv, stdin):
        with lock:
            ran.append((clock.now(), tuple(argv)))
        fail = "h2" in " ".join(argv) and "down" in argv
        return Result(returncode=2 if fail else 0, stdout="", stderr="boom" if fail else "")

    with pytest.raises(KeyboardInterrupt), FaultScheduler(plan, clock.now, runner) as s:
        t0 = clock.now()
        s.start(t0)
        s.start(t0 + 10**9)  # only the first start counts
        time.sleep(0.15)
        raise KeyboardInterrupt  # interrupted: the links are restored all the same
    rec = s.records()
    applied = {a["label"]: a for a in rec["applied"]}
    cut = applied["h1 link (h1-eth0) rate 50 Mbit/s"]
    assert cut["ok"] and 0.02 <= cut["applied_s"] < 0.1
    down = applied["h2 link (h2-eth0) down"]
    assert not down["ok"] and "boom" in down["error"]
    assert rec["restored"]["ok"] and rec["not_applied"] == []
    restore = [a for _, a in ran[-len(plan.restore) :]]
    assert restore == list(plan.restore)


def test_a_run_that_ends_early_leaves_later_steps_unapplied_and_restores() -> None:
    tb = loads_testbed(STAR)
    plan = plan_faults(tb, parse_schedule("at 10s: h1 link down"))
    ran = []
    clock = _Clock()
    with FaultScheduler(plan, clock.now, lambda a, s: ran.append(a) or Result(0, "", "")) as s:
        s.start(clock.now())
    rec = s.records()
    assert rec["applied"] == [] and rec["not_applied"][0]["planned_s"] == 10.0
    assert ran == list(plan.restore)


def test_effect_compares_runs_overlapping_a_window_with_the_clean_ones() -> None:
    records = {
        "applied": [
            {"event": 0, "label": "cut", "applied_s": 0.3, "planned_s": 0.3, "ok": True,
             "restore": False},
            {"event": 0, "label": "cut restored", "applied_s": 0.5, "planned_s": 0.5, "ok": True,
             "restore": True},
        ]
    }  # fmt: skip
    runs = [{"start_s": 0.1 * k, "makespan_s": 0.09} for k in range(10)]
    for r in runs[3:5]:
        r["makespan_s"] = 0.27
    windows = fault_windows(records, 1.0)
    assert windows == [(0, "cut", 0.3, 0.5)]
    eff = fault_effect(runs, windows)
    assert eff["clean_runs"] == 8 and eff["events"][0]["runs"] == 2
    assert eff["events"][0]["vs_clean"] == pytest.approx(3.0)
    ev = trace_events(records, runs, 9)
    assert any(e["ph"] == "i" and e["name"] == "cut" for e in ev)
    assert any(e["ph"] == "X" and e["tid"] == 1 and e["dur"] == pytest.approx(2e5) for e in ev)


def _no_netem(monkeypatch) -> None:
    import genie.testbed.netns as netns

    monkeypatch.setattr(netns, "netem_available", lambda runner=None: False)


def test_emulate_refuses_faults_it_cannot_run(dp, capsys, monkeypatch) -> None:
    _no_netem(monkeypatch)  # as on a kernel without sch_netem
    for extra, message in [
        (["--faults", "at 1s: h1 link loss 2%"], "netem"),
        (["--faults", "at 1s: h9 link down"], "no such link"),
        (["--faults", "at 1s: h1 link down", "--mode", "isolated"], "overlapped"),
    ]:
        args = ["emulate", dp, "--testbed", "testbed/netns-star.toml", *extra]
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("genie: error:") and message in err[0]


def test_effect_also_counts_runs_overlapping_any_fault() -> None:
    windows = [(0, "a", 0.3, 0.5), (1, "b", 0.8, 0.85)]
    runs = [{"start_s": 0.1 * k, "makespan_s": 0.09} for k in range(10)]
    for k in (3, 4, 8):
        runs[k]["makespan_s"] = 0.18
    eff = fault_effect(runs, windows)
    assert (eff["clean_runs"], eff["fault_runs"]) == (7, 3)
    assert eff["fault_vs_clean"] == pytest.approx(2.0)


class _FakeCtl:
    """Controller stand-in for run_size: records each Go and when it told on_start."""

    def __init__(self) -> None:
        self.gos: list[tuple[int, int, bool]] = []
        self.t = 0

    def prepare(self, *a) -> None: ...

    def release(self) -> None: ...

    def abort(self, why) -> None: ...

    def run(self, program, iters, warmup, record_steps=False, on_start=None):
        from types import SimpleNamespace

        from genie.controller.results import Instance

        self.t += 10**9
        if on_start is not None:
            on_start(self.t)
        self.gos.append((iters, warmup, on_start is not None))
        inst = [
            Instance(iteration=i, warmup=i < warmup, start_ns=self.t + i, end_ns=self.t + i + 1,
                     time_s=1e-9, rank_start_ns=[], rank_end_ns=[], ranks=[])
            for i in range(warmup + iters)
        ]  # fmt: skip
        return SimpleNamespace(instances=inst)


@pytest.mark.parametrize("batched", [False, True])
def test_bench_with_a_clock_runs_warmups_apart_and_starts_it_at_the_first_measured_go(
    batched,
) -> None:
    from genie.controller.sweep import run_size

    ctl, starts, batches = _FakeCtl(), [], []
    got = run_size(
        ctl, None, ["a", "b"], iters=3, warmup=2, on_start=starts.append,
        on_instances=batches.append if batched else None,
    )  # fmt: skip
    assert ctl.gos[0] == (2, 0, False)  # the warm-ups: a Go of their own, no clock
    assert all(told for _, w, told in ctl.gos[1:]) and all(w == 0 for _, w, _ in ctl.gos[1:])
    assert starts[0] == 2 * 10**9  # the first measured Go's start
    assert [x.warmup for x in got] == [True, True, False, False, False]
    assert [x.iteration for x in got] == [0, 1, 2, 3, 4]
    assert len(batches) == (len(ctl.gos) if batched else 0)
    # without a clock: one Go carries warm-ups and measured iterations, as before
    ctl = _FakeCtl()
    run_size(ctl, None, ["a"], iters=3, warmup=2)
    assert ctl.gos == [(3, 2, False)]


def test_bench_fault_doc_splits_each_size_and_prints_its_effect(capsys) -> None:
    from types import SimpleNamespace

    from genie.api.benchmark import fault_doc
    from genie.commands._bench_output import print_fault_effect
    from genie.controller.results import Instance

    def inst(start_s, t, warmup=False):
        ns = int(10**9 + start_s * 1e9)
        return Instance(iteration=0, warmup=warmup, start_ns=ns, end_ns=ns + int(t * 1e9),
                        time_s=t, rank_start_ns=[], rank_end_ns=[], ranks=[])  # fmt: skip

    small = [inst(-0.2, 9.0, warmup=True)] + [inst(0.1 * k, 0.09) for k in range(5)]
    small[2].time_s = 0.15  # from 0.1 s into the cut (0.2 s to 0.3 s)
    small[3].time_s = 0.3  # from 0.2 s: inside it
    big = [inst(0.6 + 0.1 * k, 0.09) for k in range(5)]  # all after the cut
    records = {
        "schedule": ["at 200ms: h0 link rate 40mbit for 100ms"],
        "applied": [
            {"event": 0, "label": "cut", "applied_s": 0.2, "planned_s": 0.2, "ok": True,
             "restore": False, "error": ""},
            {"event": 0, "label": "cut ended", "applied_s": 0.3, "planned_s": 0.3, "ok": True,
             "restore": True, "error": ""},
        ],
        "not_applied": [],
        "restored": {"ok": True, "errors": []},
    }  # fmt: skip
    rows = [SimpleNamespace(size=1024, instances=small), SimpleNamespace(size=4096, instances=big)]
    doc = fault_doc(records, 10**9, rows)
    s1, s2 = doc["by_size"]
    assert (s1["size"], s1["fault_runs"], s1["clean_runs"]) == (1024, 2, 3)
    assert s1["fault_median_s"] == pytest.approx((0.15 + 0.3) / 2)
    assert (s2["fault_runs"], s2["clean_runs"]) == (0, 5) and s2["fault_vs_clean"] is None
    print_fault_effect(doc)
    out = capsys.readouterr().out
    assert "first measured Go of the first size" in out
    assert "1.0 KiB: 3 iterations overlapping no fault" in out and "(2.50x)" in out
    assert "links restored" in out


def test_a_schedule_widens_the_run_timeouts() -> None:
    from genie.controller.session import Timeouts
    from genie.faults.run import TCP_RECOVERY_S, widen_timeouts

    tb = loads_testbed(STAR)
    plan = plan_faults(
        tb,
        parse_schedule("at 0s: h1 link rate 8mbit for 1s; at 2s: sw0-p2 down; at 3s: sw0-p2 up"),
    )
    assert plan.down_s() == pytest.approx(1.0)
    t = widen_timeouts(Timeouts(), plan)
    # down 1 s, and one down event: TCP's backed-off resend after it
    assert t.slow_rate == pytest.approx(1e6)
    assert t.outage_s == pytest.approx(1 + TCP_RECOVERY_S) and t.base_s == Timeouts().base_s
    # a delay costs its length and, like a loss, maybe a backed-off resend
    plan = plan_faults(tb, parse_schedule("at 0s: h1 link delay 30ms; at 1s: h2 link loss 1%"))
    t = widen_timeouts(Timeouts(), plan)
    assert t.outage_s == pytest.approx(Timeouts().outage_s + 0.03 + 2 * TCP_RECOVERY_S)


def test_bench_refuses_faults_it_cannot_run(capsys, monkeypatch) -> None:
    _no_netem(monkeypatch)
    for extra, message in [
        (["--faults", "at 1s: h1 link delay 5ms"], "netem"),
        (["--faults", "at 1s: h1 link down", "--dilation", "10"], "dilation"),
    ]:
        assert main(["bench", "--testbed", "testbed/netns-star.toml", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("genie: error:") and message in err[0]


def test_lab_commands_quote_restore_and_refuse_what_they_cannot_put_back() -> None:
    import shlex

    from genie.faults.lab_plan import (
        LabFault,
        apply_restore,
        check_iface,
        end_script,
        event_script,
        restore_qdisc,
    )

    for bad in ["eth0;reboot", "$(id)", "-x", "a b", "x" * 16, "eth0'"]:
        with pytest.raises(FaultError, match="plain interface name"):
            check_iface(bad)
    down = LabFault(0, "a", "eth0", "down", 1.0, 0.05)
    apply, undo = apply_restore(down, None)
    assert (apply, undo) == ("$S ip link set dev eth0 down", "$S ip link set dev eth0 up")
    script = event_script(down, 0.25, "/r/faults/abcdef12-0.log", "abcdef12", (apply, undo))
    # one detached command: apply and restore in ONE setsid'd shell, with the sleeps between
    assert script.count("setsid sh -c ") == 1 and script.endswith("& echo $!")
    body = shlex.split(script.split("setsid sh -c ", 1)[1])[0]
    assert body.index("sleep 0.250000") < body.index(apply) < body.index("sleep 0.050000")
    assert body.index("sleep 0.050000") < body.index(undo)
    # rate: the qdisc read before comes back (the kernel default by deletion, a tbf as it was)
    cut = LabFault(1, "a", "eth0", "rate", 0.0, 1.0, rate=50e6 / 8)
    back = restore_qdisc("eth0", '[{"kind":"fq_codel","root":true,"options":{}}]')
    assert back == ["tc", "qdisc", "del", "dev", "eth0", "root"]
    apply, undo = apply_restore(cut, back)
    assert "tbf rate 50000000bit" in apply and undo == "$S tc qdisc del dev eth0 root"
    tbf = '[{"kind":"tbf","root":true,"options":{"rate":12500000,"burst":32762,"lat":5379}}]'
    assert " ".join(restore_qdisc("eth0", tbf)).endswith(
        "tbf rate 100000000bit burst 32762 latency 5379us"
    )
    with pytest.raises(FaultError, match="cannot put back"):
        restore_qdisc("eth0", '[{"kind":"htb","root":true,"options":{}}]')
    with pytest.raises(FaultError, match="bad fault token"):
        end_script("x;y", [], "/r", [], [])
    end = end_script("abcdef12", [4242], "/r/faults", [undo], ["eth0"])
    assert "grep -q genie-fault-abcdef12 /proc/$p/cmdline" in end and "for p in 4242;" in end


def test_a_lab_schedule_goes_to_the_ssh_scheduler() -> None:
    from genie.faults.lab import LabFaultScheduler
    from genie.faults.run import scheduler

    path = "tests/data/lab-faults.toml"
    tb = load_testbed(path)
    plan = plan_faults(tb, parse_schedule("at 1s: a-ens1f0 down for 20ms"))
    s = scheduler(plan, time.monotonic_ns, path)
    assert isinstance(s, LabFaultScheduler) and s.access["a"].ssh_host == "10.0.0.1"
