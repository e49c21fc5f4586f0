"""What the node decodes of one workload's rank files share (``DecodeMemo``).

The ranks of a generated workload repeat most node frames byte for byte (same id, name, deps
and attrs; only collectives' process groups and point-to-point peers differ), and the frames
that differ still repeat their head: every field before the attrs (id, name, type, deps,
times, IOInfo). ``et_fast.decode_nodes`` keeps both, so a frame seen before costs a dict
lookup, and a frame whose head was seen at the same place in an earlier file costs a byte
comparison plus the lookup of its attr fields. Only what the canonical fast path decoded is
kept (never a frame that protobuf read or rejected), and the memo is bounded: it starts over
when full and gives up on a kind of lookup once it stops paying.
"""

from __future__ import annotations

#: a frame memo stops memoising frames (and lets go of them) after this many misses while
#: fewer than one lookup in ``_FRAME_HIT_SHARE`` hits: a trace whose frames do not repeat (a
#: per-node id) pays for a bounded number of lookups only. The head memo follows the same rule.
_FRAME_PROBE = 1 << 15
_FRAME_HIT_SHARE = 8
#: heads kept per frame position (most recently matched first): one per pipeline stage or
#: other variant of a position that a workload's ranks have
HEADS_PER_ROW = 16


class DecodeMemo:
    """The attr memos, node names, decoded node frames by their exact bytes, and decoded frame
    heads by position, shared by the node decodes of one workload's files.

    ``frames``: frame body -> (id, name, type, ctrl_deps, data_deps, start, duration, inputs,
    outputs, attr section bytes or None, derived), the lists as tuples; a hit gives the very
    field values that decoding gave, in fresh lists. ``heads[k]``: for the ``k``-th node frame
    of a file, entries ``(head bytes, their length, id, name, type, ctrl_deps, data_deps,
    start, duration, inputs, outputs)`` of the fields before the attrs that canonical frames at
    that place began with. Bounded: at most ``max_frames`` frames and ``max_bytes`` bytes of
    frame keys, at most ``max_frames`` heads (then each starts over), and neither once its
    lookups stop paying (see ``_FRAME_PROBE``).
    """

    def __init__(self, max_frames: int = 1 << 17, max_bytes: int = 24 << 20) -> None:
        from genie.workload.et_fast import AttrCache  # et_fast imports this module

        self.cache = AttrCache()
        self.tails: dict[bytes, tuple] = {}  # whole attr section bytes -> (derived, bytes)
        self.rests: dict[bytes, tuple] = {}  # attr section after its first attr -> pairs
        self.names: dict[bytes, str] = {}
        self.frames: dict[bytes, tuple] = {}
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.frame_bytes = 0  # bytes of the keys of ``frames``
        self.frames_on = max_frames > 0
        self.hits = 0
        self.misses = 0
        self.nodes = 0  # nodes decoded with this memo (for its attr-section memo's policy)
        self.tail_misses = 0
        self.heads: list[list[tuple]] = []
        self.head_count = 0  # entries in ``heads``
        self.heads_on = max_frames > 0
        self.head_hits = 0
        self.head_misses = 0
        #: the process-group name (derived slot 2) of every node decoded with this memo, lists
        #: left out, '' (the default group) perhaps not: a loader asks whether one names a
        #: group without looking at each node (each derived tuple is noted where it is made)
        self.pg_names: set = set()
        #: METADATA nodes decoded with this memo (their frames are never kept in ``frames``:
        #: each is counted, so a rank whose decode left this unchanged has none)
        self.meta_nodes = 0

    def keep(self, key: bytes, fields: tuple) -> None:
        """Memoise one frame decoded on the fast path, within the bounds (full: start over)."""
        if len(self.frames) >= self.max_frames or self.frame_bytes + len(key) > self.max_bytes:
            self.frames.clear()
            self.frame_bytes = 0
            if len(key) > self.max_bytes:
                return
        self.frames[key] = fields
        self.frame_bytes += len(key)

    def keep_head(self, row: int, entry: tuple) -> None:
        """Memoise the head of the ``row``-th frame of a file (first among that row's heads;
        the least recently matched one goes when the row is full; all go when the memo is)."""
        heads = self.heads
        if self.head_count >= self.max_frames:
            heads.clear()
            self.head_count = 0
        if row >= len(heads):
            if row >= self.max_frames:
                return
            heads.extend([] for _ in range(row + 1 - len(heads)))
        got = heads[row]
        if len(got) >= HEADS_PER_ROW:
            got.pop()
            self.head_count -= 1
        got.insert(0, entry)
        self.head_count += 1

    def settle(
        self,
        hits: int,
        misses: int,
        nodes: int,
        tail_misses: int,
        head_hits: int = 0,
        head_misses: int = 0,
    ) -> None:
        """Count one decode's lookups; stop memoising frames (or heads) once they do not
        repeat enough to pay for the lookups (see ``_FRAME_PROBE``)."""
        self.hits += hits
        self.misses += misses
        self.nodes += nodes
        self.tail_misses = tail_misses
        if self.misses > _FRAME_PROBE and self.hits * _FRAME_HIT_SHARE < self.misses:
            self.frames_on = False
            self.frames.clear()
            self.frame_bytes = 0
        self.head_hits += head_hits
        self.head_misses += head_misses
        if self.head_misses > _FRAME_PROBE and self.head_hits * _FRAME_HIT_SHARE < self.head_misses:
            self.heads_on = False
            self.heads.clear()
            self.head_count = 0
