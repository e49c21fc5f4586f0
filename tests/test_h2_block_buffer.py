"""The block buffer the columnar decoder reuses: each fill is the block's bytes and zero padding,
whatever an earlier (larger) fill left in the buffer."""

from __future__ import annotations

import numpy as np

from genie.workload import et_columns
from genie.workload.et_codec import split_frames, write_trace
from genie.workload.et_fast import decode_nodes
from genie.workload.model import Attr, Metadata, Node


def test_a_smaller_block_after_a_larger_one_is_padded_with_zeros() -> None:
    bb = et_columns.BlockBuffer()
    big = bytes(range(1, 256)) * 8
    got = bb.fill(big, 3, 1000)
    assert got.tobytes() == big[3:1003] + bytes(et_columns._PAD)
    got = bb.fill(b"\xff" * 40, 10, 20)
    assert len(got) == 20 + et_columns._PAD
    assert got.tobytes() == b"\xff" * 20 + bytes(et_columns._PAD)


def test_files_of_falling_size_share_one_buffer_and_decode_like_et_fast(tmp_path) -> None:
    """A large file, then smaller ones cut short: the last frame of each reads the padding,
    not what the large file left in the buffer."""
    ns = [
        Node(
            i,
            f"op{i % 5}",
            4,
            ctrl_deps=[i - 1] if i > 1 else [],
            duration_micros=i,
            attrs=[Attr("rf_id", "int64_val", i), Attr("num_ops", "int64_val", 3 * i)],
        )
        for i in range(1, 200)
    ]
    path = tmp_path / "t.0.et"
    write_trace(path, Metadata(), ns)
    full = path.read_bytes()
    ends = [e for _k, _s, e in split_frames(full, "t")]
    pos = ends[0]  # past the metadata frame
    interner = et_columns.Interner()
    for keep in (len(ns), 50, 7):
        end = ends[keep]
        # whole, and a last frame whose id varint runs past its end (into the padding)
        for data in (full[:end], full[:end] + b"\x02\x08\x80"):
            try:
                ref = decode_nodes(data, pos, "t")[0]
            except Exception as exc:
                try:
                    et_columns.decode_columns(data, pos, "t", "", interner)
                except Exception as exc2:
                    assert type(exc2) is type(exc) and str(exc2) == str(exc)
                else:
                    raise AssertionError("columns accepted what et_fast refused") from None
                continue
            cols = et_columns.decode_columns(data, pos, "t", "", interner)
            assert cols.to_nodes() == ref
            assert np.array_equal(cols.id, np.arange(1, keep + 1, dtype=np.uint64))
