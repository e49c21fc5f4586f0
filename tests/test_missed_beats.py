"""How long a silent peer is tolerated: the agent's ``--missed-beats`` and a testbed's
``missed_beats``, the controller taking the testbed's, and out-of-range values refused in one line.

(What the limit does when a peer stops is tested in tests/test_hardening2_liveness.py; the QEMU
guest's RDMA test runs both sides with 20 beats.)
"""

from __future__ import annotations

import argparse

import pytest

from genie.controller.local import open_controller
from genie.controller.session import Timeouts
from genie.errors import TestbedError, UsageError
from genie.testbed.emit import dumps_testbed
from genie.testbed.loader import loads_testbed
from genie.testbed.netns import agent_argv
from genie.wire.liveness import MISSED_BEATS_LIMIT
from genie_agent.cli import add_agent_arguments, check_args

STATIC = """[testbed]
name = "genie-mb"
kind = "static"
{extra}
[topology]
shape = "star"
rate = "1gbit"

[[hosts]]
name = "h0"
control = "127.0.0.1:17391"

[[hosts]]
name = "h1"
control = "127.0.0.1:17392"
"""


def _agent_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_agent_arguments(p)
    return p.parse_args(["--listen", "127.0.0.1:17391", "--id", "h0", *argv])


def test_testbed_missed_beats_is_read_written_and_bounded() -> None:
    assert loads_testbed(STATIC.format(extra="")).missed_beats == MISSED_BEATS_LIMIT
    tb = loads_testbed(STATIC.format(extra="missed_beats = 20"))
    assert tb.missed_beats == 20
    again = loads_testbed(dumps_testbed(tb))
    assert again.missed_beats == 20 and again == tb
    assert "missed_beats" not in dumps_testbed(loads_testbed(STATIC.format(extra="")))
    with pytest.raises(TestbedError, match=r"missed_beats.*must be >= 2, got 1"):
        loads_testbed(STATIC.format(extra="missed_beats = 1"))
    with pytest.raises(TestbedError, match=r"missed_beats.*must be <= 1000, got 5000"):
        loads_testbed(STATIC.format(extra="missed_beats = 5000"))
    with pytest.raises(TestbedError, match="missed_beats"):
        loads_testbed(STATIC.format(extra='missed_beats = "many"'))


def test_agent_missed_beats_option() -> None:
    assert _agent_args().missed_beats == MISSED_BEATS_LIMIT
    args = _agent_args("--missed-beats", "20")
    check_args(args)
    assert args.missed_beats == 20
    for bad in ("1", "0", "-3", "1001"):
        with pytest.raises(UsageError, match=r"--missed-beats must be 2\.\.1000 heartbeats"):
            check_args(_agent_args("--missed-beats", bad))


def test_controller_takes_the_testbeds_rule_unless_told_otherwise() -> None:
    tb = loads_testbed(STATIC.format(extra="missed_beats = 20"))
    for timeouts, want in ((None, 20), (Timeouts(prepare_base_s=60), 20),
                           (Timeouts(missed_beats=5), 5)):  # fmt: skip
        ctl = open_controller(tb, timeouts)  # connects nothing until .connect()
        try:
            assert ctl.missed_limit == want
        finally:
            ctl.close()
            ctl.t.close()


def test_netns_agents_start_with_the_testbeds_rule() -> None:
    text = """[testbed]
name = "genie-mb"
kind = "netns"
missed_beats = 7

[topology]
shape = "star"
hosts = 2
rate = "1gbit"
"""
    tb = loads_testbed(text)
    argv = agent_argv(tb, 0, python="python3")
    assert argv[argv.index("--missed-beats") + 1] == "7"


def test_deploys_start_agents_with_the_testbeds_rule() -> None:
    import json

    from genie.deploy.config import loads_deploy
    from genie.deploy.deployer import agent_config
    from genie.deploy.inventory import inventory_data
    from genie.deploy.supervise import agent_command

    for beats in (MISSED_BEATS_LIMIT, 20):
        tb, cfg = loads_deploy(STATIC.format(extra=f"missed_beats = {beats}") + "\n[deploy]\n")
        conf = json.loads(
            agent_config(tb.host("h0"), cfg.hosts["h0"], "/r", "process", 0.5,
                         missed_beats=tb.missed_beats)
        )  # fmt: skip
        cmd = agent_command(conf, "py")
        if beats == MISSED_BEATS_LIMIT:  # configs written before the rule existed compare equal
            assert "missed_beats" not in conf and "--missed-beats" not in cmd
        else:
            assert cmd[cmd.index("--missed-beats") + 1] == "20"
        assert inventory_data(tb, cfg)["all"]["vars"]["genie_missed_beats"] == beats
