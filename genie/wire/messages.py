"""The control protocol between controller and agents: one flat set of typed messages.

Every message is a msgspec struct in one tagged union (field ``t`` names the type), encoded as
msgpack in a single ZeroMQ frame. Every message carries ``job`` (the job id, "" outside a job) and
``epoch`` (the controller's counter for that job): an agent answers a message whose job/epoch do
not match its current job with an ``Error`` and changes nothing; a controller drops replies for
another job or epoch.

Ownership: an agent claimed by a Hello answers with a fresh random ``session`` secret (in its
HelloReply), and every later message of that controller carries it; a message without the
holder's secret is refused as ``busy``, whatever controller id it names (the id is shown in
errors, the secret never is). A Hello may also name the ``testbed`` the controller drives; an
agent started for a testbed refuses controllers of any other one.

Direction and meaning:

========================  ======  =========================================================
message                   dir     meaning
========================  ======  =========================================================
Hello                     c->a    claim the agent (controller id, protocol, testbed)
HelloReply                a->c    agent id, version, facts, data port, session secret
Heartbeat                 both    liveness; missed beats are counted on both sides
TimeProbe / TimeReply     c<->a   NTP-style clock sample (t0 controller, t1/t2 agent)
Prepare                   c->a    programs (as specs), placement, peers, data-plane options
Prepared                  a->c    connections made, buffers allocated
Go                        c->a    run program k: iterations, warm-up, start time, timeout
Result                    a->c    per rank, per iteration (and per step) monotonic times
Error                     a->c    something was refused or failed; ``code`` says what
Abort / Release           c->a    stop and drop the job / drop a finished job (back to idle)
Ack                       a->c    Abort/Release done, agent idle
Quit                      c->a    stop the agent process
Bye                       c->a    the controller leaves; the agent is free again
DataProbe / ...Reply      c<->a   can this agent reach its last job's peers' data ports?
========================  ======  =========================================================

Sizes in a message are checked against ``Limits`` before anything is allocated.
"""

from __future__ import annotations

import msgspec

from genie.errors import ProtocolError
from genie.wire.counters import CounterSets
from genie.wire.frames import check_frame
from genie.wire.text import sanitize

PROTOCOL_VERSION = 3  # 2: session secrets and testbed identity in Hello/HelloReply; 3: NIC and
# stack counters in Result, RDMA channels, QPs per connection, rank devices and traffic class
# in RdmaOptions
DEFAULT_INTRA_BW = 300e9  # bytes/s, one direction of an NVLink-class fabric
DEFAULT_INTRA_LAT = 1e-6  # s


class Msg(msgspec.Struct, tag_field="t", kw_only=True, forbid_unknown_fields=True):
    """Base of every control message: the job and epoch it belongs to."""

    job: str = ""
    epoch: int = 0
    session: str = ""  # the holder's secret from HelloReply, on every controller message


class HostFacts(msgspec.Struct, kw_only=True):
    """What an agent reports about its host (from psutil)."""

    hostname: str = ""
    cpus_logical: int = 0
    cpus_physical: int = 0
    memory_bytes: int = 0
    nics: list[dict[str, str | int | bool | list[str]]] = []
    python: str = ""
    platform: str = ""
    # bytes the agent may still allocate when it answers the hello (the host's available
    # memory, less where the agent's memory cgroup allows less); 0: not known (older agent)
    memory_available: int = 0
    # the machine, i.e. the running kernel (genie.wire.hostid): agents with one host_id share
    # its memory; "": not known (older agent)
    host_id: str = ""


class Hello(Msg, tag="hello"):
    """Controller claims the agent."""

    controller: str
    version: str
    protocol: int = PROTOCOL_VERSION
    testbed: str = ""  # identity of the testbed the controller drives ("" for any)


class HelloReply(Msg, tag="hello_reply"):
    """Agent introduces itself."""

    agent: str
    version: str
    protocol: int
    facts: HostFacts
    data_addr: str
    data_port: int
    pid: int = 0


class Heartbeat(Msg, tag="heartbeat"):
    """Liveness beat; ``seq`` counts beats of the sender."""

    seq: int = 0
    sender: str = ""


class TimeProbe(Msg, tag="time_probe"):
    """Clock sample request; ``t0`` is the controller's clock at send (ns)."""

    t0: int


class TimeReply(Msg, tag="time_reply"):
    """Clock sample answer: agent clock at receipt (t1) and at reply (t2), ns."""

    t0: int
    t1: int
    t2: int


class RdmaOptions(msgspec.Struct, kw_only=True):
    """RDMA data-plane settings for one job (used when ``DataOptions.transport == "rdma"``)."""

    device: str = ""  # verbs device name; "" picks the device behind the agent's data address
    devices: dict[str, str] = {}  # per agent id: its device (testbed hosts' rdma_device)
    port: int = 1  # device port
    gid_index: int = -1  # GID table index; -1 picks the RoCE v2 GID of the data address
    mode: str = "write_imm"  # "write_imm" (RDMA WRITE WITH IMMEDIATE) or "send" (SEND/RECV)
    window: int = 16  # work requests in flight per queue pair
    segment: int = 1 << 20  # a step is cut into work requests of at most this many bytes
    events: bool = False  # wait for completions on a completion channel instead of polling
    mtu: int = 0  # path MTU in bytes (256..4096); 0 takes the smaller of both ports' active MTU
    timeout: int = 14  # local ACK timeout exponent (4.096 us x 2^timeout)
    retry: int = 7  # transport retries before a work request fails
    # queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION): a step is split across them; a
    # rank pair has one connection per channel (``DataOptions.channels``), so channels x qps
    qps: int = 1
    # stall watchdog: no work completion for this long while work is outstanding fails the run
    # naming the queue pairs (qp_num), peers and work requests; 0: the run's timeout
    stall_s: float = 0.0
    # per global rank, the verbs device of its NIC ("" or absent: the one carrying the rank's
    # address of ``DataOptions.rank_addrs`` in a RoCE v2 GID, else the agent's device)
    rank_devices: list[str] = []
    # the GRH traffic class of every queue pair (NCCL_IB_TC's role, 0..255): on RoCE, under the
    # common DSCP trust mapping, DSCP = traffic_class >> 2 and priority = DSCP >> 3, so the
    # traffic lands on the lossless priority the preflight checks; 0 is the verbs default
    traffic_class: int = 0


class QpFacts(msgspec.Struct, kw_only=True, array_like=True):
    """What one side of an RC queue pair tells its peer (sent over the job's TCP side channel)."""

    src: int  # global rank that owns this queue pair
    dst: int  # global rank at the other end
    qpn: int
    psn: int
    gid: str  # 16 bytes as 32 hex digits
    lid: int
    rkey: int  # of the region the peer writes into (this rank's scratch)
    address: int  # virtual address of that region
    length: int  # its size in bytes
    mtu: int  # this port's active MTU in bytes
    # per RECV step from ``dst``: [program, tag, seq, step index, scratch offset, bytes]
    slots: list[tuple[int, int, int, int, int, int]] = []
    qpns: list[int] = []  # every lane's queue pair, lane order (``qpn`` is lane 0's); [] = [qpn]


LEAN_REGION = 8 << 20  # lean payloads: bytes of a rank's send region (and of its receive sink)
LEAN_SAMPLE = 4096  # lean payloads: bytes at the head of each part whose CRC is checked


class DataOptions(msgspec.Struct, kw_only=True):
    """Data-plane settings for one job."""

    transport: str = "tcp"  # "tcp" or "rdma" (same programs, same results)
    rdma: RdmaOptions = msgspec.field(default_factory=RdmaOptions)

    streams: int = 1  # TCP connections per rank pair; a large step is split across them
    # the streams of a rank pair fall into ``channels`` equal sets (NCCL: each communicator
    # its own connections); program p sends on set ``program_channels[p]`` (absent: 0), so a
    # program of one process group never queues behind another group's bytes in one stream
    channels: int = 1
    program_channels: list[int] = []
    sndbuf: int = 0  # SO_SNDBUF in bytes; 0 keeps the kernel's autotuning
    rcvbuf: int = 0  # SO_RCVBUF in bytes; 0 keeps the kernel's autotuning
    verify: bool = True  # checksum every message and check its header on receipt
    # TCP congestion control of every data socket: an algorithm, or a preference list
    # ("cubic,reno": the first the host accepts); "": the host's default. Recorded either way.
    congestion: str = ""
    # what a step's bytes are: "real" (each run has working buffers of its own and the
    # collective is computed in them: its results are checkable), "lean" (a rank sends pattern
    # bytes from one fixed region and receives into another, skips the reductions, and with
    # verify on checksums the first ``LEAN_SAMPLE`` bytes of each part: the same bytes on the
    # wire, memory that does not grow with the message sizes)
    payload: str = "real"
    min_part: int = 65536  # a step is split across streams only in parts at least this big
    token: str = ""  # per-job secret a data connection must present
    connect_timeout_s: float = 10.0
    # ranks on one agent: "model" exchanges their steps in memory and takes the modelled time
    # (latency + bytes / bandwidth per sending rank, NVLink-class), "wire" puts them on TCP
    intra: str = "model"
    intra_bandwidth: float = DEFAULT_INTRA_BW  # bytes/s, each sending rank's intra-host port
    intra_latency: float = DEFAULT_INTRA_LAT  # s
    # per global rank, the data address of its NIC ("" or absent: its agent's data address);
    # each rank's connections leave from and arrive at its NIC's address
    rank_addrs: list[str] = []


class Prepare(Msg, tag="prepare"):
    """Set up a job: rebuild programs, connect the data plane, allocate buffers."""

    programs: list[bytes]  # each a ProgramSpec as Program.to_bytes()
    placement: list[str]  # global rank -> agent id
    endpoints: dict[str, str]  # agent id -> "IP:PORT" of its data listener
    options: DataOptions = msgspec.field(default_factory=DataOptions)


class WireConditions(msgspec.Struct, kw_only=True):
    """The TCP conditions an agent's data connections run under, read back after they are set
    up (what is in force, not what was asked): every value a measurement depends on."""

    congestion: list[str] = []  # congestion control of the data sockets (each kind once)
    sndbuf: list[int] = []  # SO_SNDBUF in force, bytes (each value once)
    rcvbuf: list[int] = []
    mss: list[int] = []  # TCP maximum segment size, bytes
    kernel: str = ""
    # sysctls of the agent's network namespace: tcp_congestion_control, tcp_ecn,
    # tcp_slow_start_after_idle, tcp_rmem, tcp_wmem, fib_multipath_hash_policy, ...
    sysctl: dict[str, str] = {}
    # per data NIC (name): its MTU and root qdisc as `tc` shows it ("" where unknown); an RDMA
    # job's: per verbs device, rdma_qps and rdma_traffic_class (what its queue pairs were given)
    nics: dict[str, dict[str, str]] = {}


class Prepared(Msg, tag="prepared"):
    """Job set up on this agent."""

    ranks: list[int]
    connections: int
    setup_s: float
    conditions: WireConditions = msgspec.field(default_factory=WireConditions)


class OpItem(msgspec.Struct, kw_only=True, array_like=True):
    """One communication op of a rank's op list (see ``genie_agent.oplist``)."""

    program: int  # index into the job's programs: the collective it runs (a template)
    deps: list[int] = []  # earlier ops of this rank's list that must have finished
    gap_ns: int = 0  # compute wait after the last dep finished (after the start if no deps)
    # earlier ops that must have finished too, with no gap (issue order of a process group)
    after: list[int] = []
    # the collective instance, the same number on every rank that takes part and carried by its
    # frames; at most once per op list (-1: the program's index, each program used once)
    instance: int = -1

    @property
    def key(self) -> int:
        """What this op's frames carry: its instance (or its program when it names none)."""
        return self.instance if self.instance >= 0 else self.program


class RankOps(msgspec.Struct, kw_only=True, array_like=True):
    """The op list of one global rank."""

    rank: int
    ops: list[OpItem] = []


class Go(Msg, tag="go"):
    """Run program ``program`` warmup+iters times, starting at a controller-clock instant."""

    program: int = 0
    iters: int = 1
    warmup: int = 0
    start_at: int = 0  # controller clock, ns
    offset: int = 0  # estimated (agent clock - controller clock), ns
    timeout_s: float = 30.0  # bound for one iteration
    record_steps: bool = False
    spin_ns: int = 0  # busy-wait this long before the start (0: sleep only)
    rt_start: bool = False  # wait for the start under SCHED_FIFO (needs CAP_SYS_NICE)
    # op-list mode (when non-empty): each rank runs its ops once, several programs in flight;
    # ``program``/``iters``/``warmup`` are then ignored and RankResult.start/end hold per-op times
    ops: list[RankOps] = []


class RankResult(msgspec.Struct, kw_only=True, array_like=True):
    """Times of one rank, agent monotonic clock in ns; index = iteration (warm-up first)."""

    rank: int
    start: list[int]
    end: list[int]
    step_start: list[list[int]] = []  # [iteration][step], when record_steps
    step_end: list[list[int]] = []
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_verified: int = 0
    buffer_crc: int = -1  # CRC-32 of the working buffer after the last iteration (verify on)
    cpu_ns: int = -1  # CPU time the rank's thread used from the start to its end (-1: unknown)


class Result(Msg, tag="result"):
    """The outcome of one Go on this agent."""

    program: int
    warmup: int
    ranks: list[RankResult]
    start_lateness_ns: int = 0  # how late the agent began relative to the requested start
    retransmits: int = -1  # TCP segments the data sockets retransmitted during this Go (-1: ?)
    # NIC and stack counter deltas over this Go, per source (genie.wire.counters); bounded
    counters: CounterSets = []


class Error(Msg, tag="error"):
    """A refusal or failure; ``code`` is one of ERROR_CODES."""

    code: str
    message: str
    about: str = ""  # tag of the message this answers, if any


class Abort(Msg, tag="abort"):
    """Stop the running job and release it."""

    reason: str = ""


class Release(Msg, tag="release"):
    """Drop a finished (prepared) job: close its connections and free its buffers."""


class Ack(Msg, tag="ack"):
    """Abort/Release/Quit done."""

    what: str


class Quit(Msg, tag="quit"):
    """Stop the agent process."""


class Bye(Msg, tag="bye"):
    """The controller leaves: release any job and free the agent for another controller."""


class DataProbe(Msg, tag="data_probe"):
    """Check the data network: TCP-connect to every peer of the agent's last job (no address
    comes in the message: the agent probes only the endpoints its last Prepare named)."""

    timeout_s: float = 1.0


class DataProbeReply(Msg, tag="data_probe_reply"):
    """Per peer agent: "" if its data listener answered, else why not."""

    peers: dict[str, str]


ERROR_CODES = (
    "malformed",  # frame could not be decoded
    "stale",  # job/epoch does not match the agent's current job
    "state",  # message not valid in the agent's current state
    "busy",  # another controller holds the agent
    "version",  # protocol version mismatch
    "limit",  # a size or count in the message is beyond the agent's limits
    "program",  # a program could not be rebuilt
    "prepare",  # data-plane setup failed
    "run",  # a run failed (transport error, timeout, data check)
    "direction",  # a message only the agent sends arrived at the agent
    "testbed",  # the agent serves another testbed than the controller's Hello names
    "internal",  # the agent hit a bug handling the message (it keeps running)
)

Message = (
    Hello
    | HelloReply
    | Heartbeat
    | TimeProbe
    | TimeReply
    | Prepare
    | Prepared
    | Go
    | Result
    | Error
    | Abort
    | Release
    | Ack
    | Quit
    | Bye
    | DataProbe
    | DataProbeReply
)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode(msg: Msg) -> bytes:
    """Encode one message as a msgpack frame; FrameTooLarge if it exceeds the frame limit."""
    frame = _encoder.encode(msg)
    check_frame(len(frame), f"the {type(msg).__name__} frame")
    return frame


def decode(frame: bytes | memoryview) -> Msg:
    """Decode one frame; raise ProtocolError (never anything else) if it is not a valid message.

    The peer's text in it (errors, facts, names) comes out bounded and free of control
    characters (``genie.wire.text.sanitize``): the one place every frame from a peer passes."""
    check_frame(len(frame))
    try:
        return sanitize(_decoder.decode(frame))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"malformed control frame: {exc}") from None
    except Exception as exc:  # msgspec raises only the above; belt and braces for odd input
        raise ProtocolError(f"malformed control frame: {type(exc).__name__}: {exc}") from None


class Limits(msgspec.Struct, kw_only=True):
    """Bounds an agent checks before allocating anything a message asks for."""

    max_ranks: int = 4096
    max_programs: int = 4096  # distinct programs of a job (a step's instances share them)
    max_rank_bytes: int = 8 << 30  # buffer + scratch of one rank of one program
    max_agent_bytes: int = 12 << 30  # all buffers of all programs on this agent
    max_streams: int = 64
    max_iters: int = 100_000
    max_steps: int = 1_000_000  # steps of one rank of one program
    max_build_steps: int = 2_000_000  # bound of all steps a Prepare makes this agent build
    max_chunks: int = 65_536
    max_start_delay_s: float = 60.0  # a Go may start at most this far in the future
