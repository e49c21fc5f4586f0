"""Ask a deployed agent to say hello over its control socket, the way a controller would."""

from __future__ import annotations

import time

from genie.controller.channel import ZmqChannel
from genie.controller.session import Controller, Timeouts
from genie.errors import AgentBusy, ControlUnreachable, GenieError, RunTimeout
from genie.testbed import Host
from genie.wire.messages import HelloReply


class HelloResult:
    """The outcome of one hello: the reply, or why there was none (``busy`` counts as alive)."""

    def __init__(self, reply: HelloReply | None, error: str = "", busy: bool = False) -> None:
        self.reply = reply
        self.error = error
        self.busy = busy

    @property
    def alive(self) -> bool:
        """True if the agent answered (a hello reply, or 'busy' because a controller holds it)."""
        return self.reply is not None or self.busy


def say_hello(host: Host, timeout_s: float, keys_dir: str | None = None) -> HelloResult:
    """Connect to ``host``'s agent, wait up to ``timeout_s`` for its hello, then leave (Bye).

    ``keys_dir``: speak CURVE with the controller pair and the agent's public key from this
    ``genie keys init`` directory (None: unauthenticated). A refused handshake is an error
    (an AgentRefused from ``connect``) whose text says ``refused``.
    """
    transport = ZmqChannel({host.name: host.control}, keys_dir=keys_dir)
    ctl = Controller(transport, [host.name], timeouts=Timeouts(register_s=timeout_s))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                replies = ctl.connect()
                return HelloResult(replies[host.name])
            except GenieError as exc:
                text = str(exc)
                if isinstance(exc, ControlUnreachable) and time.monotonic() < deadline:
                    transport.recv(0.05)  # the connection is not up yet; watch its handshake
                    continue
                if keys_dir and isinstance(exc, RunTimeout):
                    text += (
                        " (over CURVE, an agent serving another key pair than "
                        f"{keys_dir} expects fails the handshake silently: redeploy the keys)"
                    )
                return HelloResult(None, text, busy=isinstance(exc, AgentBusy))
    finally:
        ctl.close()
        transport.close()
