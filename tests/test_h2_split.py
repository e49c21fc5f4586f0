"""The columnar decoder's frame splitter (``et_columns._split``) against ``et_codec.split_frames``:
the same frame offsets and ends for length prefixes of one to five bytes, and a refusal wherever
``split_frames`` refuses (a prefix or a frame cut by the end, a prefix of more than 5 bytes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from genie.errors import TraceFormatError
from genie.workload.et_codec import split_frames
from genie.workload.et_columns import _split, _Unsplittable


def _prefix(n: int, pad: int = 0) -> bytes:
    """``n`` as a varint, with ``pad`` continuation bytes of zero (not shortest form)."""
    out = bytearray()
    while True:
        if n < 0x80 and not pad:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7
        if n == 0 and pad:
            pad -= 1
            if not pad:
                out.append(0)
                return bytes(out)


LENGTHS = st.sampled_from([0, 1, 5, 127, 128, 300, 16383, 16384, 20000, 2_100_000])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(LENGTHS, st.integers(0, 5)), max_size=6),
    st.integers(0, 10**7),
    st.binary(max_size=3),
)
def test_split_matches_split_frames(frames, cut, tail) -> None:
    data = b"".join(_prefix(n, pad) + bytes(n) for n, pad in frames)
    for d in (data, data[: cut % (len(data) + 1)], data + tail):
        try:
            ref = split_frames(d, "t")
        except TraceFormatError:
            try:
                _split(d, 0)
            except _Unsplittable:
                continue
            raise AssertionError("the splitter accepted what split_frames refused") from None
        got, ends = _split(d, 0)
        assert got == [f for f, _s, _e in ref]
        assert ends == [e for _f, _s, e in ref]
