"""Why an agent failed this controller, in one word, and the one table from that word to a type.

A fault carries its agents and its ``cause`` as fields (``genie.errors.AgentFault``). A cause is
an agent's Error code (``genie.wire.messages.ERROR_CODES``: "busy", "testbed", "run", ...) or
one of the words below, which the control channel or the controller itself finds. ``fault``
turns a cause into its exception: the type depends on the cause alone, never on which code path
or which moment noticed it.
"""

from __future__ import annotations

from genie.errors import (
    AgentBusy,
    AgentFault,
    AgentLost,
    AgentRefused,
    AgentUnreachable,
    ControlUnreachable,
    DataPlaneError,
    RunTimeout,
)

# what the control channel reports
HANDSHAKE_REFUSED = "handshake-refused"  # the agent refused the connection's (CURVE) handshake
NOT_CONNECTED = "not-connected"  # no connection to the agent to send on
SOCKET_FAILED = "socket-failed"  # the control socket itself failed
# what the controller finds
TIMED_OUT = "timed-out"  # a bounded wait ran out
NO_HELLO = "no-hello"  # an agent never answered the hello
MISSED_BEATS = "missed-beats"  # an agent stopped beating
SILENT_TO_PROBE = "silent-to-probe"  # an agent did not answer a probe after a peer's failure
AGENT_DIED = "agent-died"  # an agent's process ended (its exit status or signal is known)
CONNECTION_DROPPED = "connection-dropped"  # its connection closed; its address refuses since
DATA_UNREACHABLE = "data-unreachable"  # after a stall: agents cannot reach peers' data ports

_TYPES: dict[str, type[AgentFault]] = {
    # an agent's Error codes
    "busy": AgentBusy,
    "testbed": AgentRefused,
    "run": DataPlaneError,
    # the channel's
    HANDSHAKE_REFUSED: AgentRefused,
    NOT_CONNECTED: ControlUnreachable,
    SOCKET_FAILED: ControlUnreachable,
    # the controller's
    TIMED_OUT: RunTimeout,
    NO_HELLO: AgentUnreachable,
    MISSED_BEATS: AgentLost,
    SILENT_TO_PROBE: AgentLost,
    AGENT_DIED: AgentLost,
    CONNECTION_DROPPED: AgentLost,
    DATA_UNREACHABLE: RunTimeout,
}


def fault_type(cause: str) -> type[AgentFault]:
    """The exception type of ``cause`` (AgentFault for a cause without a type of its own)."""
    return _TYPES.get(cause, AgentFault)


def fault(cause: str, message: str, *agents: str) -> AgentFault:
    """The exception for ``cause``, about ``agents``, saying ``message``."""
    return fault_type(cause)(message, agents=agents, cause=cause)
