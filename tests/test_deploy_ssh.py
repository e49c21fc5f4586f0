"""Deploy to localhost over real SSH (a throwaway sshd on a loopback port), then bench, then stop.

Module-scoped: one sshd, one first deploy; the tests run in order (deploy, bench, CURVE
hello and refusal, redeploy unchanged with bad hosts beside it, key rotation, agents
status/logs/stop, redeploy after stop). The deploy carries ``[deploy] keys``, so the agent
serves CURVE throughout and every controller here uses the keys. Every agent
and the sshd are ended by pid in teardown, even on failure. The remote root is a temporary
directory, so the machine's own ~/.genie is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from genie.cli import main
from genie.controller.local import free_port_range, stop_pids
from genie.deploy.config import load_deploy
from genie.deploy.deployer import Artifacts, deploy
from genie.deploy.testing import LocalSshd, LocalSshdUnavailable
from genie.deploy.wheel import build_wheel, wheel_digest
from genie.keys import init_keys, write_pair

pytestmark = pytest.mark.slow


def _testbed(name: str, hosts: list[tuple[str, int]]) -> str:
    out = [
        f'[testbed]\nname = "{name}"\nkind = "static"\ntransport = "tcp"\n',
        '[topology]\nshape = "star"\nrate = "10gbit"\n',
    ]
    for host, port in hosts:
        out.append(
            f'[[hosts]]\nname = "{host}"\ncontrol = "127.0.0.1:{port}"\n'
            'data_addr = "127.0.0.1"\nranks = 2\n'
        )
    return "\n".join(out)


def _kill_recorded(root: Path) -> None:
    """End whatever the deploy recorded under ``root`` (supervisor, then agent), by pid."""
    try:
        rec = json.loads((root / "agent.pid").read_text())
    except (OSError, ValueError):
        return
    sup = rec.get("supervisor")
    if isinstance(sup, int):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{sup}/cmdline").read_bytes()
            if b"genie.deploy.supervise" in cmd:
                os.kill(sup, signal.SIGTERM)
    if isinstance(rec.get("agent"), int):
        time.sleep(0.3)
        stop_pids([rec["agent"]], timeout_s=5)


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie not yet reaped by init


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy")
    try:
        sshd = LocalSshd.start(d / "ssh")
    except LocalSshdUnavailable as exc:
        pytest.skip(f"cannot run a test sshd: {exc}")
    root = d / "remote-genie"
    ports = free_port_range(4)
    closed = free_port_range(1, lo=61000, hi=64000)  # nothing listens there
    keys = d / "keys"
    init_keys(keys, agents=["h0"])
    other = d / "other-keys"  # a controller the agent does not know (right agent key, so the
    other.mkdir()  # refusal is the agent's decision, not a failed server-key check)
    write_pair(other, "controller")
    (other / "agent-h0.public").write_bytes((keys / "agent-h0.public").read_bytes())
    common = sshd.deploy_toml(
        remote_root=str(root), wheelhouse="bundle", hello_timeout=15, keys=str(keys)
    )
    good = d / "good.toml"
    good.write_text(_testbed("dep", [("h0", ports)]) + "\n" + common)
    mixed = d / "mixed.toml"
    mixed.write_text(
        _testbed(
            "depmix",
            [("h0", ports), ("badport", ports + 1), ("badkey", ports + 2), ("nopy", ports + 3)],
        )
        + "\n"
        + common
        + f"\n[deploy.hosts.badport]\nport = {closed}\n"
        + f'\n[deploy.hosts.badkey]\nkey = "{sshd.other_key}"\n'
        + f'\n[deploy.hosts.nopy]\npython = "{d}/no-such-python3.11"\n'
    )
    nokeys = d / "nokeys.toml"
    nokeys.write_text(good.read_text().replace(f"keys = {json.dumps(str(keys))}\n", ""))
    assert "keys" not in nokeys.read_text().split("[deploy]")[1]
    info = {
        "nokeys": nokeys,
        "dir": d, "sshd": sshd, "root": root, "good": good, "mixed": mixed,
        "keys": keys, "other": other,
    }  # fmt: skip
    try:
        yield info
    finally:
        _kill_recorded(root)
        sshd.stop()


@pytest.fixture(scope="module")
def first(site):
    tb, cfg = load_deploy(site["good"])
    t0 = time.monotonic()
    wheel = build_wheel()
    art = Artifacts.of(wheel, cfg.wheelhouse)
    stages: list[tuple[str, str]] = []
    out = deploy(tb, cfg, ["h0"], art, lambda h, s: stages.append((h, s)))
    site["first_s"] = time.monotonic() - t0
    print(f"first deploy (wheel build + venv + bundle install): {site['first_s']:.1f} s")
    return out[0], art, stages


def test_first_deploy_installs_runs_agent_from_remote_venv(site, first) -> None:
    outcome, art, stages = first
    assert outcome.ok, outcome.detail
    assert outcome.action == "installed"
    assert outcome.mode == "process"  # no systemd user manager in this container
    root = site["root"]
    stamp = json.loads((root / "stamp.json").read_text())
    assert stamp["wheel"] == wheel_digest(art.wheel)
    cmd = Path(f"/proc/{outcome.agent_pid}/cmdline").read_bytes().split(b"\0")
    assert cmd[0].decode() == str(root / "venv" / "bin" / "python")
    assert b"genie_agent" in cmd and b"h0" in cmd and b"-P" in cmd  # python -P -m genie_agent
    pidrec = json.loads((root / "agent.pid").read_text())
    assert pidrec["agent"] == outcome.agent_pid
    seen = [s for h, s in stages if h == "h0"]
    assert seen[0] == "connect" and "pip" in seen and seen[-1] == "ok"
    assert cmd[cmd.index(b"--keys") + 1].decode() == str(root / "keys")


def test_remote_key_files_modes_and_no_controller_secret(site, first) -> None:
    assert first[0].ok, first[0].detail
    root, keys = site["root"], site["keys"]
    kd = root / "keys"
    mode = {p.relative_to(kd).as_posix(): p.stat().st_mode & 0o777 for p in kd.rglob("*")}
    assert kd.stat().st_mode & 0o777 == 0o700
    assert mode == {
        "agent-h0.public": 0o644,
        "agent-h0.secret": 0o600,
        "controller.public": 0o644,
        "trusted": 0o700,
    }
    assert (kd / "agent-h0.secret").read_bytes() == (keys / "agent-h0.secret").read_bytes()
    ctl_secret = (keys / "controller.secret").read_bytes().strip()
    assert not list(root.rglob("controller.secret"))
    for p in root.rglob("*"):  # not under another name either (venv and wheels included)
        if p.is_file() and p.stat().st_size < 1 << 20 and p.suffix not in (".so", ".whl"):
            assert ctl_secret not in p.read_bytes(), p
    assert json.loads((root / "agent.json").read_text())["keys"] == str(kd)


def test_controller_with_right_keys_gets_hello_other_keys_refused(site, first) -> None:
    from genie.deploy.hello import say_hello
    from genie.testbed import load_testbed

    assert first[0].ok, first[0].detail
    host = load_testbed(site["good"]).host("h0")
    good = say_hello(host, 10.0, str(site["keys"]))
    assert good.reply is not None and good.reply.pid == first[0].agent_pid, good.error
    t0 = time.monotonic()
    bad = say_hello(host, 10.0, str(site["other"]))
    took = time.monotonic() - t0
    assert bad.reply is None and not bad.busy
    assert "refused" in bad.error and "authentication" in bad.error, bad.error
    assert took < 5.0  # refused at the handshake, not a timeout
    plain = say_hello(host, 1.0)  # no keys at all: no hello either
    assert plain.reply is None
    fp = (site["other"] / "controller.public").read_bytes()[:8].decode()
    log = (site["root"] / "agent.log").read_text()
    assert f"refused controller with unknown CURVE key {fp}" in log


def test_bench_runs_through_deployed_agent(site, first, capsys, monkeypatch) -> None:
    monkeypatch.setenv("GENIE_KEYS", str(site["keys"]))  # bench's controller speaks CURVE
    outcome = first[0]
    assert outcome.ok, outcome.detail
    rc = main(
        [
            "bench", "--testbed", str(site["good"]), "--collective", "all_reduce",
            "--sizes", "1KiB", "--iters", "2", "--warmup", "0", "--no-store", "--json",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = json.loads(out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert len(rows) == 1 and rows[0]["size"] == 1024
    log = (site["root"] / "agent.log").read_text()
    assert "listening on" in log
    assert not _gone(outcome.agent_pid)  # the same deployed agent served it


def test_hosts_check_sees_the_deployed_genie(site, first, capsys) -> None:
    from genie import __version__

    assert main(["hosts", "check", "--testbed", str(site["good"]), "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)[0]["checks"]}
    assert checks["genie"] == {"name": "genie", "status": "ok", "value": __version__, "fix": ""}
    assert checks["nic"]["status"] == "ok" and checks["nic"]["value"].startswith("lo up")
    assert checks["keys"]["status"] == "ok", checks["keys"]
    assert checks["keys"]["value"].startswith("agent-h0 pair + 1 controller key")
    assert checks["agent"]["status"] == "ok", checks["agent"]
    assert checks["agent"]["value"].endswith("CURVE")


def test_second_deploy_unchanged_and_bad_hosts_fail_one_line_each(site, first, capsys) -> None:
    outcome = first[0]
    root = site["root"]
    site_pkg = next((root / "venv" / "lib").glob("python3*/site-packages/genie"))
    before = (site_pkg.stat().st_mtime_ns, (root / "stamp.json").stat().st_mtime_ns)
    t0 = time.monotonic()
    wheel = str(first[1].wheel)  # the same wheel: the shared checkout may change meanwhile
    rc = main(["deploy", "--testbed", str(site["mixed"]), "--wheel", wheel, "--json"])
    took = time.monotonic() - t0
    cap = capsys.readouterr()
    assert cap.out.startswith("["), cap.err
    data = {d["host"]: d for d in json.loads(cap.out)}
    per_host = {n: d["seconds"] for n, d in data.items()}
    print(f"second deploy (4 hosts, 3 bad): {took:.1f} s", per_host)
    assert rc == 1  # some hosts failed
    h0 = data["h0"]
    assert h0["ok"] and h0["action"] == "unchanged"
    assert h0["agent_pid"] == outcome.agent_pid
    assert "install" not in h0["timings_s"] and "start" not in h0["timings_s"]
    assert before == (site_pkg.stat().st_mtime_ns, (root / "stamp.json").stat().st_mtime_ns)
    for name, words in (
        ("badport", "connection refused"),
        ("badkey", "authentication failed"),
        ("nopy", "not found"),
    ):
        d = data[name]
        assert not d["ok"] and d["action"] == "failed"
        assert words in d["detail"] and "\n" not in d["detail"], d["detail"]


def test_supervisor_restarts_a_crashed_agent(site, first) -> None:
    from genie.deploy.hello import say_hello
    from genie.testbed import load_testbed

    old = first[0].agent_pid
    pidfile = site["root"] / "agent.pid"
    assert json.loads(pidfile.read_text())["agent"] == old
    os.kill(old, signal.SIGKILL)  # the deployed agent: started by this test's deploy
    deadline = time.monotonic() + 15
    new = old
    while time.monotonic() < deadline and new == old:
        with contextlib.suppress(OSError, ValueError):
            new = json.loads(pidfile.read_text())["agent"]
        time.sleep(0.05)
    assert new != old
    host = load_testbed(site["good"]).host("h0")
    hello = say_hello(host, 15.0, str(site["keys"]))
    assert hello.reply is not None and hello.reply.pid == new, hello.error
    assert json.loads(pidfile.read_text())["restarts"] == 1


def test_new_keys_rewritten_agent_restarted_without_reinstall(site, first, capsys) -> None:
    from genie.deploy.hello import say_hello
    from genie.testbed import load_testbed

    root, keys = site["root"], site["keys"]
    old_copy = site["dir"] / "old-keys"
    old_copy.mkdir()
    for name in ("controller.public", "controller.secret"):
        (old_copy / name).write_bytes((keys / name).read_bytes())
    os.chmod(old_copy / "controller.secret", 0o600)
    old_pid = json.loads((root / "agent.pid").read_text())["agent"]
    stamp = (root / "stamp.json").stat().st_mtime_ns
    init_keys(keys, agents=["h0"], overwrite=True)  # rotate every key
    wheel = str(first[1].wheel)
    rc = main(["deploy", "--testbed", str(site["good"]), "--wheel", wheel, "--json"])
    cap = capsys.readouterr()
    [h0] = json.loads(cap.out)
    assert rc == 0 and h0["ok"], h0
    assert h0["action"] == "restarted" and "install" not in h0["timings_s"]
    assert h0["agent_pid"] != old_pid and stamp == (root / "stamp.json").stat().st_mtime_ns
    assert (root / "keys" / "agent-h0.secret").read_bytes() == (
        keys / "agent-h0.secret"
    ).read_bytes()
    for name in ("controller.secret", "agent-h0.secret", "agent.secret"):
        for d in (keys, old_copy):
            if (d / name).exists():
                secret = (d / name).read_text().strip()
                assert secret not in cap.out and secret not in cap.err  # never printed
    # the old controller, told the agent's new public key, must be refused by the agent
    (old_copy / "agent-h0.public").write_bytes((keys / "agent-h0.public").read_bytes())
    host = load_testbed(site["good"]).host("h0")
    now = say_hello(host, 10.0, str(keys))
    assert now.reply is not None and now.reply.pid == h0["agent_pid"], now.error
    stale = say_hello(host, 10.0, str(old_copy))  # the old controller key is no longer trusted
    assert stale.reply is None and "refused" in stale.error, stale.error
    fp = (old_copy / "controller.public").read_bytes()[:8].decode()
    assert f"refused controller with unknown CURVE key {fp}" in (root / "agent.log").read_text()


def test_agents_status_logs_stop(site, first, capsys) -> None:
    pid = json.loads((site["root"] / "agent.pid").read_text())["agent"]
    tb = str(site["good"])
    assert main(["agents", "status", "h0", "--testbed", tb, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)[0]
    assert st["running"] and st["agent_pid"] == pid
    sup = st["supervisor_pid"]
    assert main(["agents", "logs", "h0", "--testbed", tb, "-n", "20"]) == 0
    assert "listening on" in capsys.readouterr().out
    assert main(["agents", "stop", "h0", "--testbed", tb, "--json"]) == 0
    stopped = json.loads(capsys.readouterr().out)[0]
    assert set(stopped["stopped"]) == {pid, sup}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (_gone(pid) and _gone(sup)):
        time.sleep(0.05)
    assert _gone(pid) and _gone(sup)
    assert not (site["root"] / "agent.pid").exists()
    assert main(["agents", "status", "h0", "--testbed", tb, "--json"]) == 3


def test_deploy_after_stop_restarts_without_reinstall(site, first, capsys) -> None:
    old = first[0].agent_pid
    wheel = str(first[1].wheel)
    args = ["--testbed", str(site["mixed"]), "--hosts", "h0", "--wheel", wheel, "--json"]
    rc = main(["deploy", *args])  # --hosts: the bad hosts of the file are left out
    [h0] = json.loads(capsys.readouterr().out)
    assert rc == 0 and h0["ok"], h0
    assert h0["action"] == "restarted" and "install" not in h0["timings_s"]
    assert h0["agent_pid"] != old and not _gone(h0["agent_pid"])
    assert main(["agents", "stop", "h0", "--testbed", str(site["good"]), "--json"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _gone(h0["agent_pid"]):
        time.sleep(0.05)
    assert _gone(h0["agent_pid"])


def test_deploy_without_keys_removes_them(site, first, capsys) -> None:
    from genie.deploy.hello import say_hello
    from genie.testbed import load_testbed

    wheel = str(first[1].wheel)
    rc = main(["deploy", "--testbed", str(site["nokeys"]), "--wheel", wheel, "--json"])
    [h0] = json.loads(capsys.readouterr().out)
    assert rc == 0 and h0["ok"], h0
    assert "install" not in h0["timings_s"]
    root = site["root"]
    assert not (root / "keys").exists()
    assert "keys" not in json.loads((root / "agent.json").read_text())
    cmd = Path(f"/proc/{h0['agent_pid']}/cmdline").read_bytes().split(b"\0")
    assert b"--keys" not in cmd
    hello = say_hello(load_testbed(site["good"]).host("h0"), 10.0)
    assert hello.reply is not None and hello.reply.pid == h0["agent_pid"], hello.error
    assert main(["agents", "stop", "h0", "--testbed", str(site["good"]), "--json"]) == 0
    capsys.readouterr()
