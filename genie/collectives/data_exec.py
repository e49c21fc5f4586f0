"""The data executor: runs a program over numpy buffers with real message passing, and checks it.

Each byte of the wire is one int64 element here, so sums never overflow and every offset of a
program maps directly onto the arrays. Ready steps of all ranks run in a seeded random order
(an eager SEND snapshots its bytes into the (sender, receiver, tag) channel; a RECV completes
when its message is there), so a missing dependency shows up as a wrong result or as a race.
``verify`` also proves the race rule of ``genie.collectives.program`` for every rank.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from genie.collectives.emit import gc_paused
from genie.collectives.layout import (
    a2a_block,
    buffer_bytes,
    input_region,
    result_regions,
    split_matrix,
    v_layout,
)
from genie.collectives.program import Op, Program, Step
from genie.errors import CollectiveError, DeadlockError

_OPS = ("SEND", "RECV", "REDUCE", "COPY")
#: a message: (sender, receiver, tag, how many such messages went before it)
MessageKey = tuple[int, int, int, int]
_NO_KEY: MessageKey = (-1, -1, -1, -1)  # the key slot of a step that is no SEND/RECV


class DataResult:
    """Buffers after a run, plus how much work the run did."""

    __slots__ = ("buffers", "messages", "steps")

    def __init__(self, buffers: list[np.ndarray], steps: int, messages: int) -> None:
        self.buffers = buffers
        self.steps = steps
        self.messages = messages


def _describe(rank: int, idx: int, st: Step) -> str:
    if st.op == Op.RECV:
        return f"rank {rank} step {idx} RECV {st.nbytes} B from {st.peer} tag {st.tag}"
    if st.op == Op.SEND:
        return f"rank {rank} step {idx} SEND {st.nbytes} B to {st.peer} tag {st.tag}"
    return f"rank {rank} step {idx} {_OPS[st.op]}"


def make_inputs(program: Program, seed: int = 0) -> list[np.ndarray]:
    """Random per-rank input buffers (values 0..999 in their input regions, -1 elsewhere)."""
    rng = np.random.default_rng(seed)
    size = buffer_bytes(program.spec)
    bufs = []
    for r in range(program.n_ranks):
        b = np.full(size, -1, dtype=np.int64)
        off, nb = input_region(program.spec, r)
        b[off : off + nb] = rng.integers(0, 1000, nb)
        bufs.append(b)
    return bufs


def run_data(
    program: Program,
    inputs: Sequence[np.ndarray] | None = None,
    *,
    seed: int = 0,
    max_steps: int = 5_000_000,
) -> DataResult:
    """Execute every rank's steps over copies of ``inputs``; raise DeadlockError if stuck."""
    with gc_paused():
        return _run_data(program, inputs, seed=seed, max_steps=max_steps)


def _run_data(
    program: Program,
    inputs: Sequence[np.ndarray] | None = None,
    *,
    seed: int = 0,
    max_steps: int = 5_000_000,
) -> DataResult:
    n = program.n_ranks
    if inputs is None:
        inputs = make_inputs(program, seed)
    if len(inputs) != n:
        raise CollectiveError(f"need {n} input buffers, got {len(inputs)}")
    bufs = [np.array(b, dtype=np.int64, copy=True) for b in inputs]
    steps = [sts for _, sts in program.iter_ranks()]
    total = sum(len(s) for s in steps)
    if total > max_steps:
        raise CollectiveError(f"program has {total} steps; the data executor runs <= {max_steps}")
    size = buffer_bytes(program.spec)
    pending: list[list[int]] = []
    children: list[list[list[int]]] = []
    seq: list[list[MessageKey]] = []  # message key of each SEND/RECV (_NO_KEY for others)
    counts: dict[tuple[int, int, int], list[int]] = {}
    send_op, recv_op = Op.SEND, Op.RECV
    for r, sts in enumerate(steps):
        pend = [0] * len(sts)
        kids: list[list[int]] = [[] for _ in sts]
        keys: list[MessageKey] = [_NO_KEY] * len(sts)
        for i, st in enumerate(sts):
            _check_step(program, r, i, st, sts, size)
            deps = st.deps
            if deps:
                pend[i] = len(deps)
                for d in deps:
                    kids[d].append(i)
            op = st.op
            if op == send_op:
                k = (r, st.peer, st.tag)
                side = 0
            elif op == recv_op:
                k = (st.peer, r, st.tag)
                side = 1
            else:
                continue
            c = counts.get(k)
            if c is None:
                c = counts[k] = [0, 0]
            keys[i] = (*k, c[side])
            c[side] += 1
        pending.append(pend)
        children.append(kids)
        seq.append(keys)
    rnd = random.Random(seed).random
    ready = [(r, i) for r in range(n) for i, p in enumerate(pending[r]) if p == 0]
    mailbox: dict[MessageKey, np.ndarray] = {}
    waiting: dict[MessageKey, int] = {}  # key -> recv step index on receiver
    scratch: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
    done = 0
    messages = 0
    finished: list[tuple[int, int]] = []
    while ready:
        j = int(rnd() * len(ready))
        item = ready[j]
        last = ready.pop()
        if j < len(ready):
            ready[j] = last
        r, i = item
        st = steps[r][i]
        op = st.op
        if op == send_op:
            key = seq[r][i]
            data = bufs[r][st.offset : st.offset + st.nbytes].copy()
            messages += 1
            finished.append(item)
            w = waiting.pop(key, None)
            if w is None:
                mailbox[key] = data
            else:
                _deliver(steps, scratch, data, key, w)
                finished.append((key[1], w))
        elif op == recv_op:
            key = seq[r][i]
            sent = mailbox.pop(key, None)
            if sent is None:
                waiting[key] = i
                continue
            _deliver(steps, scratch, sent, key, i)
            finished.append(item)
        else:
            data = scratch[r].pop(st.src)
            if op == Op.REDUCE:
                bufs[r][st.offset : st.offset + st.nbytes] += data
            else:
                bufs[r][st.offset : st.offset + st.nbytes] = data
            finished.append(item)
        for fr, fi in finished:
            done += 1
            pend = pending[fr]
            for kid in children[fr][fi]:
                pend[kid] -= 1
                if pend[kid] == 0:
                    ready.append((fr, kid))
        finished.clear()
    if done != total:
        raise DeadlockError(_deadlock_message(steps, pending, waiting, mailbox))
    if mailbox:
        (s, d, t, nth), _ = next(iter(mailbox.items()))
        raise CollectiveError(
            f"{len(mailbox)} message(s) never received, e.g. SEND #{nth} from rank {s} to {d} "
            f"tag {t}"
        )
    return DataResult(bufs, total, messages)


def _deliver(steps, scratch, data: np.ndarray, key, recv_idx: int) -> None:
    dst = key[1]
    st = steps[dst][recv_idx]
    if len(data) != st.nbytes:
        raise CollectiveError(
            f"rank {dst} step {recv_idx} RECV expects {st.nbytes} B from {key[0]} tag {key[2]} "
            f"but the matching SEND carries {len(data)} B"
        )
    scratch[dst][recv_idx] = data


def _check_step(program: Program, r: int, i: int, st: Step, sts, size: int) -> None:
    n = program.n_ranks
    for d in st.deps:
        if not 0 <= d < i:
            raise CollectiveError(f"{_describe(r, i, st)} depends on step {d}, not an earlier one")
    if st.nbytes < 0 or (st.op != Op.RECV and not 0 <= st.offset <= st.offset + st.nbytes <= size):
        raise CollectiveError(
            f"{_describe(r, i, st)}: range {st.offset}+{st.nbytes} outside buffer"
        )
    if st.op in (Op.SEND, Op.RECV) and not (0 <= st.peer < n and st.peer != r):
        raise CollectiveError(f"{_describe(r, i, st)}: bad peer")
    if st.op in (Op.REDUCE, Op.COPY):
        if not (0 <= st.src < i and sts[st.src].op == Op.RECV and st.src in st.deps):
            raise CollectiveError(f"{_describe(r, i, st)}: src {st.src} is not a RECV it waits for")
        if sts[st.src].nbytes != st.nbytes:
            raise CollectiveError(f"{_describe(r, i, st)}: size differs from RECV {st.src}")


def _deadlock_message(steps, pending, waiting, mailbox) -> str:
    n = len(steps)
    stuck = {r for r in range(n) if any(p > 0 for p in pending[r])} | {k[1] for k in waiting}
    first: dict[int, tuple[int, MessageKey]] = {}
    for key, i in waiting.items():  # the earliest waiting RECV of each rank
        d = key[1]
        if d not in first or i < first[d][0]:
            first[d] = (i, key)
    causes, knock_on = [], []
    for d, (i, (s, _d, _t, k)) in sorted(first.items()):
        line = f"{_describe(d, i, steps[d][i])} (#{k} on that channel)"
        if s in stuck:
            knock_on.append(f"{line} waits on stuck rank {s}")
        else:
            causes.append(f"{line} has no matching SEND: rank {s} finished without sending it")
    ranks = sorted(stuck)
    head = f"deadlock: ranks {', '.join(map(str, ranks[:16]))}{' ...' if len(ranks) > 16 else ''}"
    head += f" cannot finish ({len(waiting)} RECV(s) waiting)"
    detail = (causes + knock_on)[:8]
    return head + ("; " + "; ".join(detail) if detail else "")


def _overlaps(offs: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return (offs < hi) & (ends > lo)


def check_races(program: Program, rank: int) -> None:
    """Prove that steps of ``rank`` touching overlapping bytes, one writing, are ordered by deps."""
    sts = program.steps(rank)
    m = len(sts)
    if m == 0:
        return
    anc = [0] * m
    for i, st in enumerate(sts):
        a = 0
        for d in st.deps:
            a |= anc[d] | (1 << d)
        anc[i] = a
    offs = np.array([st.offset for st in sts], dtype=np.int64)
    ends = offs + np.array([st.nbytes for st in sts], dtype=np.int64)
    touches = np.array([st.op != Op.RECV and st.nbytes > 0 for st in sts])
    for i, st in enumerate(sts):
        if st.op not in (Op.REDUCE, Op.COPY) or st.nbytes == 0:
            continue
        hits = np.nonzero(touches & _overlaps(offs, ends, st.offset, st.offset + st.nbytes))[0]
        for j in map(int, hits):
            if j == i:
                continue
            lo, hi = (j, i) if j < i else (i, j)
            if not (anc[hi] >> lo) & 1:
                raise CollectiveError(
                    f"race on rank {rank}: {_describe(rank, lo, sts[lo])} and "
                    f"{_describe(rank, hi, sts[hi])} touch the same bytes without a dependency"
                )


def expected(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The buffer each rank must hold at the end (only its ``result_regions`` are promised)."""
    spec = program.spec
    n = spec.n_ranks
    coll = spec.collective
    if coll in ("all_reduce", "reduce_scatter", "reduce"):
        total = np.sum(np.stack(inputs), axis=0)
        return [total.copy() for _ in range(n)]
    if coll == "all_gather":
        out = np.full_like(inputs[0], -1)
        for r in range(n):
            off, nb = input_region(spec, r)
            out[off : off + nb] = inputs[r][off : off + nb]
        return [out.copy() for _ in range(n)]
    if coll == "broadcast":
        return [inputs[spec.root].copy() for _ in range(n)]
    if coll == "send_recv":
        return [inputs[(r - 1) % n].copy() for r in range(n)]
    if coll == "all_to_all" and spec.splits:
        m = split_matrix(spec)
        _, send, recv = v_layout(spec)
        outs = []
        for r in range(n):
            o = inputs[r].copy()
            for i in range(n):
                if i != r:
                    src = inputs[i][send[i][r] : send[i][r] + m[i][r]]
                    o[recv[r][i] : recv[r][i] + m[i][r]] = src
            outs.append(o)
        return outs
    if coll == "all_to_all":
        b = a2a_block(spec)
        outs = []
        for r in range(n):
            o = inputs[r].copy()
            for j in range(n):
                o[j * b : (j + 1) * b] = inputs[j][r * b : (r + 1) * b]
            outs.append(o)
        return outs
    raise CollectiveError(f"no reference result for {coll}")  # pragma: no cover


def verify(program: Program, *, seed: int = 0, races: bool = True) -> DataResult:
    """Run ``program`` on random data; raise CollectiveError unless it computes its collective."""
    if races:
        for r in range(program.n_ranks):
            check_races(program, r)
    inputs = make_inputs(program, seed)
    res = run_data(program, inputs, seed=seed)
    want = expected(program, inputs)
    for r in range(program.n_ranks):
        for off, nb in result_regions(program.spec, r):
            got = res.buffers[r][off : off + nb]
            exp = want[r][off : off + nb]
            if not np.array_equal(got, exp):
                bad = int(np.nonzero(got != exp)[0][0]) + off
                raise CollectiveError(
                    f"{program!r}: rank {r} byte {bad} holds {int(res.buffers[r][bad])}, "
                    f"expected {int(want[r][bad])}"
                )
    return res
