"""The one exception tree of genie: every error a user can cause is a GenieError.

The CLI catches GenieError, prints its one-line message and exits with ``exit_code``
(2 for bad input), so a user never sees a traceback for a mistake of theirs.
"""

from __future__ import annotations

from collections.abc import Sequence


class GenieError(Exception):
    """Root of every error genie raises on purpose."""

    exit_code: int = 2


class UsageError(GenieError):
    """A command-line argument or option is wrong."""


class MissingDependency(UsageError):
    """An optional dependency a command needs is not installed (the message says how)."""


class UnitError(UsageError):
    """A size, rate or duration string could not be parsed."""


class WorkloadError(GenieError):
    """A workload (Chakra ET files or their JSON form) is unreadable or invalid."""


class TraceFormatError(WorkloadError):
    """An ET file is truncated or corrupt; the message names the file and byte offset."""


class ValidationError(WorkloadError):
    """A workload parsed but breaks a rule (cycle, dangling dependency, missing attribute...)."""


class CollectiveError(GenieError):
    """A collective cannot be planned (unknown algorithm, bad group, bad size...)."""


class DeadlockError(CollectiveError):
    """A program or workload cannot make progress; the message names the ranks and steps."""


class ConfigError(GenieError):
    """A config file (ASTRA-sim network, system, comm group) is invalid; names file and key."""


class TopologyError(GenieError):
    """A topology description is inconsistent."""


class TestbedError(GenieError):
    """A testbed file is invalid, or building/removing a testbed failed."""

    __test__ = False  # not a pytest test class


class TestbedDown(TestbedError):
    """A netns testbed is not up on this host (or not reached by its own links): nothing sent."""

    __test__ = False
    exit_code = 1


class AdmissionError(GenieError):
    """A plan needs more than the testbed has (a host's memory): refused before any agent
    allocates anything."""


class RuntimeFault(GenieError):
    """A job on the agents failed (agent lost, data error, timeout...)."""

    exit_code = 1


class AgentFault(RuntimeFault):
    """What an agent, or the control channel to it, reported: a refusal, a loss, a failure.

    ``agents`` names the agents it is about (``agent``: the first, "" if none) and ``cause`` says
    what happened in one word: an agent's Error code (``genie.wire.messages.ERROR_CODES``) or a
    cause the channel or the controller found (``genie.controller.faults``). Code that needs to
    know whom or why reads these fields, never the message.
    """

    def __init__(
        self, message: str = "", *, agent: str = "", agents: Sequence[str] = (), cause: str = ""
    ) -> None:
        super().__init__(message)
        self.agents: tuple[str, ...] = tuple(agents) or ((agent,) if agent else ())
        self.cause = cause

    @property
    def agent(self) -> str:
        """The (first) agent this fault is about; "" if it names none."""
        return self.agents[0] if self.agents else ""


class RunTimeout(AgentFault):
    """A bounded wait on the agents ran out (the message says what was awaited, from whom)."""


class AgentUnreachable(RunTimeout):
    """An agent never answered the hello (nothing listening, not an agent, handshake refused)."""


class AgentLost(AgentFault):
    """An agent stopped answering (missed heartbeats, or silent to a probe)."""


class AgentRefused(AgentFault):
    """An agent refused this controller (CURVE keys, or another controller holds it)."""


class AgentBusy(AgentRefused):
    """An agent is held by another controller."""


class DataPlaneError(AgentFault):
    """An agent's run failed on the data plane (a peer closed, a stall timed out, bad data)."""


class ControlUnreachable(AgentFault):
    """A control message could not be sent to an agent (no route, socket gone)."""


class ProtocolError(GenieError):
    """A control-channel message was malformed, stale or unexpected."""


class FrameTooLarge(ProtocolError):
    """A control frame is larger than the wire's limit (``genie.wire.frames.MAX_FRAME_BYTES``)."""

    def __init__(self, message: str = "", *, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class StoreError(GenieError):
    """The run store cannot be read or written, or a run id does not exist."""


class StoreBusy(StoreError):
    """Another process held the run store's lock longer than genie waits for it."""

    exit_code = 1


class TransportError(RuntimeFault):
    """A data-plane transport (TCP, RDMA) failed or is unavailable."""


class DeployError(GenieError):
    """Deploying to, or checking, a lab host failed."""

    exit_code = 1


class SshError(DeployError):
    """SSH to a lab host failed (unreachable, refused, bad or missing key)."""


class DeployConfigError(DeployError):
    """The deploy settings of a testbed file are invalid (or hold a password)."""

    exit_code = 2


class CalibrationError(GenieError):
    """Runs cannot calibrate the model (too few points, nothing the fit can determine...)."""
