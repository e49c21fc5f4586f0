"""The key files deploy sends to an agent host: what goes, what never goes, and change detection.

Local only (no SSH): a plan is laid out on disk the way ``write_keys`` lays it out on a host,
and the host probe's ``keys_state`` must report the plan's digest; any drift must show.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genie.deploy.config import loads_deploy
from genie.deploy.deployer import agent_config
from genie.deploy.keyfiles import key_problem, plan_keys
from genie.deploy.remote_probe import keys_state
from genie.deploy.supervise import agent_command
from genie.errors import DeployConfigError
from genie.keys import init_keys, write_pair

TB = """
[testbed]
name = "k"
kind = "static"
transport = "tcp"
[topology]
shape = "star"
rate = "10gbit"
[[hosts]]
name = "h0"
control = "127.0.0.1:7000"
data_addr = "127.0.0.1"
ranks = 1
[[hosts]]
name = "h1"
control = "127.0.0.1:7001"
data_addr = "127.0.0.1"
ranks = 1
"""


def _lay_out(plan, d: Path) -> Path:
    d.mkdir(mode=0o700)
    (d / "trusted").mkdir(mode=0o700)
    os.chmod(d, 0o700)
    os.chmod(d / "trusted", 0o700)
    for f in plan.files:
        p = d / f.rel
        p.write_bytes(f.content)
        os.chmod(p, f.mode)
    return d


def test_plan_gives_own_pair_and_public_keys_never_controller_secret(tmp_path) -> None:
    keys = tmp_path / "keys"
    init_keys(keys, agents=["h0"])
    write_pair(keys / "trusted", "laptop")
    p0, p1 = plan_keys(str(keys), "h0"), plan_keys(str(keys), "h1")
    assert p0.agent_pair == "agent-h0" and p1.agent_pair == "agent"  # h1 has no own pair
    rels = {f.rel for f in p0.files}
    assert rels == {
        "agent-h0.public",
        "agent-h0.secret",
        "controller.public",
        "trusted/laptop.public",
    }
    secret = (keys / "agent-h0.secret").read_bytes()
    assert next(f for f in p0.files if f.rel == "agent-h0.secret").content == secret
    assert all(f.mode == 0o600 for f in p0.files if f.rel.endswith(".secret"))
    ctl_secret = (keys / "controller.secret").read_bytes().strip()
    assert all(ctl_secret not in f.content for f in p0.files + p1.files)
    assert secret.strip().decode() not in repr(p0)  # a plan in a traceback shows no secret


def test_probe_digest_matches_plan_and_sees_every_drift(tmp_path) -> None:
    keys = tmp_path / "keys"
    init_keys(keys, agents=["h0"])
    plan = plan_keys(str(keys), "h0")
    host = _lay_out(plan, tmp_path / "host-keys")
    state = keys_state(str(host))
    assert state["digest"] == plan.digest and key_problem(state, plan) is None
    assert "agent-h0.secret" not in state["publics"]  # secret bytes are never reported

    os.chmod(host / "agent-h0.secret", 0o644)
    assert "not 600" in key_problem(keys_state(str(host)), plan)
    os.chmod(host / "agent-h0.secret", 0o600)
    (host / "controller.secret").write_bytes((keys / "controller.secret").read_bytes())
    assert "controller.secret is on the host" in key_problem(keys_state(str(host)), plan)
    (host / "controller.secret").unlink()
    assert keys_state(str(host))["digest"] == plan.digest

    init_keys(keys, agents=["h0"], overwrite=True)  # rotated keys: the host copy is stale
    new = plan_keys(str(keys), "h0")
    assert new.digest != plan.digest
    assert "differ" in key_problem(keys_state(str(host)), new)
    assert key_problem(None, new) == "no key directory on the host"


def test_config_and_agent_command_carry_keys(tmp_path) -> None:
    keys = tmp_path / "keys"
    init_keys(keys)
    tb, cfg = loads_deploy(TB + f'\n[deploy]\nkeys = "{keys}"\n')
    assert cfg.keys == str(keys)
    import json

    text = agent_config(tb.host("h0"), cfg.hosts["h0"], "/r", "process", 0.5, keys=True)
    conf = json.loads(text)
    assert conf["keys"] == "/r/keys"
    cmd = agent_command(conf, "/r/venv/bin/python")
    assert cmd[cmd.index("--keys") + 1] == "/r/keys"
    plain = json.loads(agent_config(tb.host("h0"), cfg.hosts["h0"], "/r", "process", 0.5))
    assert "keys" not in plain and "--keys" not in agent_command(plain, "py")


def test_bad_key_directory_is_one_line(tmp_path) -> None:
    with pytest.raises(DeployConfigError, match="is not a directory"):
        plan_keys(str(tmp_path / "nope"), "h0")
    d = tmp_path / "half"
    d.mkdir()
    write_pair(d, "agent")  # no controller.public, nothing trusted
    with pytest.raises(DeployConfigError, match="no trusted controller keys"):
        plan_keys(str(d), "h0")
    os.chmod(d / "agent.secret", 0o644)
    with pytest.raises(DeployConfigError, match="readable by others"):
        plan_keys(str(d), "h0")


def test_systemd_unit_starts_agent_with_keys() -> None:
    from genie.deploy.agentctl import unit_text

    conf = {"id": "h0", "listen": "127.0.0.1:7000", "data_addr": "127.0.0.1", "root": "/r"}
    unit = unit_text({**conf, "keys": "/r/keys"}, "/r/venv/bin/python")
    exec_start = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert exec_start.endswith("--keys /r/keys")
    assert "--keys" not in unit_text(conf, "/r/venv/bin/python")


def test_hosts_check_keys_rule(tmp_path) -> None:
    from genie.deploy.checks import keys_check

    keys = tmp_path / "keys"
    init_keys(keys, agents=["h0"])
    _tb, plain = loads_deploy(TB)
    assert keys_check(plain, "h0", {"root": "/r", "keys": None}).status == "warn"
    _tb, cfg = loads_deploy(TB + f'\n[deploy]\nkeys = "{keys}"\n')
    host = _lay_out(plan_keys(str(keys), "h0"), tmp_path / "host-keys")
    ok = keys_check(cfg, "h0", {"root": "/r", "keys": keys_state(str(host))})
    assert ok.status == "ok" and ok.value.startswith("agent-h0 pair + 1 controller key")
    missing = keys_check(cfg, "h0", {"root": "/r", "keys": None})
    assert missing.status == "fail" and "genie deploy" in missing.fix
    (host / "controller.secret").write_bytes((keys / "controller.secret").read_bytes())
    leaked = keys_check(cfg, "h0", {"root": "/r", "keys": keys_state(str(host))})
    assert leaked.status == "fail" and leaked.fix == "rm /r/keys/controller.secret"
    assert (keys / "controller.secret").read_text().strip() not in repr(leaked)


def test_ansible_inventory_names_the_key_directory_only(tmp_path) -> None:
    from genie.deploy.inventory import host_vars

    keys = tmp_path / "keys"
    init_keys(keys, agents=["h0"])
    tb, cfg = loads_deploy(TB + f'\n[deploy]\nkeys = "{keys}"\n')
    hv = host_vars(tb, cfg, tb.host("h0"))
    assert hv["genie_keys"] == str(keys)
    text = repr(hv)
    for p in keys.glob("*.secret"):
        assert p.read_text().strip() not in text
