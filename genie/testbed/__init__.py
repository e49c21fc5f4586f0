"""Testbeds: descriptions of hosts, switches and links (TOML), and netns emulation of them."""

from genie.testbed.emit import dumps_testbed
from genie.testbed.loader import load_testbed, loads_testbed
from genie.testbed.loopback import loopback_testbed
from genie.testbed.model import Host, IntraHost, Link, Switch, Testbed

__all__ = [
    "Host",
    "IntraHost",
    "Link",
    "Switch",
    "Testbed",
    "dumps_testbed",
    "load_testbed",
    "loads_testbed",
    "loopback_testbed",
]
