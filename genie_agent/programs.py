"""Rebuild programs shipped as specs, plus the runtime's own small programs (point-to-point).

An agent receives each program as ``Program.to_bytes()`` (its ProgramSpec) and rebuilds the
steps locally. Collectives come from ``genie.collectives``; the runtime adds two builders of its
own that the collectives library has no reason to hold: ``flow/oneway`` (rank i sends ``size``
bytes to rank i + n/2, the shape of an iperf3 flow) and ``selftest/ring`` (a chained
send/recv/reduce/copy pattern that exercises every step kind, for runtime tests).
"""

from __future__ import annotations

import msgspec

from genie.collectives.program import Op, Program, ProgramSpec, Step, StepBuilder
from genie.errors import CollectiveError, ProtocolError


def _p2p_oneway(spec: ProgramSpec, rank: int) -> list[Step]:
    half = spec.n_ranks // 2
    if spec.n_ranks < 2 or spec.n_ranks % 2:
        raise CollectiveError("flow/oneway needs an even number of ranks >= 2")
    if rank < half:
        return [Step(Op.SEND, peer=rank + half, nbytes=spec.size, tag=0)]
    return [Step(Op.RECV, peer=rank - half, nbytes=spec.size, tag=0)]


def _selftest_ring(spec: ProgramSpec, rank: int) -> list[Step]:
    """Rounds of: send my chunk to the right, receive from the left, reduce (odd) or copy."""
    n = spec.n_ranks
    rounds = max(1, spec.chunks)
    chunk = spec.size // rounds
    right, left = (rank + 1) % n, (rank - 1) % n
    steps: list[Step] = []
    prev = -1
    for k in range(rounds):
        deps = (prev,) if prev >= 0 else ()
        send = len(steps)
        steps.append(Step(Op.SEND, peer=right, nbytes=chunk, tag=k, offset=k * chunk, deps=deps))
        recv = len(steps)
        steps.append(Step(Op.RECV, peer=left, nbytes=chunk, tag=k, deps=deps))
        op = Op.REDUCE if k % 2 else Op.COPY
        dst = ((k + 1) % rounds) * chunk
        steps.append(Step(op, src=recv, offset=dst, nbytes=chunk, deps=(send, recv)))
        prev = len(steps) - 1
    return steps


BUILTIN: dict[tuple[str, str], StepBuilder] = {
    ("flow", "oneway"): _p2p_oneway,
    ("selftest", "ring"): _selftest_ring,
}


def builtin_program(spec: ProgramSpec) -> Program | None:
    """The runtime's own program for ``spec``, or None if it is a library collective."""
    builder = BUILTIN.get((spec.collective, spec.algorithm))
    return Program(spec, builder) if builder else None


def rebuild(blob: bytes) -> Program:
    """Rebuild a Program from its shipped bytes; raise ProtocolError/CollectiveError if bad."""
    try:
        spec = msgspec.msgpack.decode(blob, type=ProgramSpec)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"bad program spec: {exc}") from None
    prog = builtin_program(spec)
    if prog is not None:
        return prog
    try:
        from genie.collectives import program_from_bytes
    except ImportError as exc:
        raise CollectiveError(
            f"cannot rebuild {spec.collective}/{spec.algorithm}: collectives library missing"
        ) from exc
    return program_from_bytes(blob)
