"""Fuzzing file inputs: Chakra ET bytes (random, mutated, truncated) and testbed TOML files.

Every bad input must give a ``GenieError`` (here TraceFormatError/WorkloadError or TestbedError)
with a one-line message; anything else is a bug. Case counts: ET_RANDOM + ET_MUTATED +
ET_TRUNCATED + TESTBED_MUTATED hypothesis examples, plus ATHERIS_RUNS coverage-guided inputs
over the ET reader and the protocol decoder when atheris is installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from genie.errors import GenieError
from genie.testbed import dumps_testbed, loopback_testbed
from genie.testbed.loader import loads_testbed
from genie.workload.et_codec import decode_trace, encode_trace, read_trace
from genie.workload.model import Attr, Metadata, Node

ET_RANDOM = 1500
ET_MUTATED = 1500
ET_TRUNCATED = 500
TESTBED_MUTATED = 1500
ATHERIS_RUNS = 50000
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sample_trace() -> bytes:
    nodes = [
        Node(1, "compute", 4, attrs=[Attr("num_ops", "int64_val", 1000)]),
        Node(
            2,
            "allreduce",
            7,
            data_deps=[1],
            attrs=[
                Attr("comm_type", "int64_val", 0),
                Attr("comm_size", "int64_val", 1 << 20),
                Attr("pg_name", "string_val", "0"),
            ],
        ),
        Node(3, "send", 7, ctrl_deps=[2], attrs=[Attr("x", "int32_list", [1, 2, 3])]),
    ]
    return encode_trace(Metadata("1.0", []), nodes)


TRACE = _sample_trace()
TESTBED = dumps_testbed(loopback_testbed(3, base_port=30000))


def _decode_or_genie_error(data: bytes) -> None:
    try:
        decode_trace(data, "<fuzz>")
    except GenieError as exc:
        assert "\n" not in str(exc) and str(exc)


@settings(max_examples=ET_RANDOM, **SETTINGS)
@given(hs.binary(max_size=256))
def test_random_bytes_as_et(data: bytes) -> None:
    _decode_or_genie_error(data)


@settings(max_examples=ET_MUTATED, **SETTINGS)
@given(
    hs.lists(hs.tuples(hs.integers(0, len(TRACE) - 1), hs.integers(0, 255)), min_size=1, max_size=8)
)
def test_mutated_et(edits) -> None:
    data = bytearray(TRACE)
    for pos, byte in edits:
        data[pos] = byte
    _decode_or_genie_error(bytes(data))


@settings(max_examples=ET_TRUNCATED, **SETTINGS)
@given(hs.integers(0, len(TRACE) - 1), hs.binary(max_size=16))
def test_truncated_or_extended_et(cut: int, tail: bytes) -> None:
    _decode_or_genie_error(TRACE[:cut] + tail)


def test_et_length_claims_beyond_the_file_are_refused(tmp_path: Path) -> None:
    # a frame length of 2^62: must be judged against the file, never allocated
    bad = TRACE[: len(TRACE) // 2] + b"\xff\xff\xff\xff\xff\xff\xff\xff\x3f"
    f = tmp_path / "bad.et"
    f.write_bytes(bad)
    with pytest.raises(GenieError, match=str(f)):
        read_trace(f)


@settings(max_examples=TESTBED_MUTATED, **SETTINGS)
@given(
    hs.lists(
        hs.tuples(hs.integers(0, len(TESTBED) - 1), hs.sampled_from(list("=[]\"'#\n 0x.-aZ{},"))),
        min_size=1,
        max_size=6,
    )
)
def test_mutated_testbed_files(edits) -> None:
    text = list(TESTBED)
    for pos, ch in edits:
        text[pos] = ch
    try:
        loads_testbed("".join(text), "fuzz.toml")
    except GenieError as exc:
        assert "\n" not in str(exc) and "fuzz.toml" in str(exc)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[testbed]",
        "[testbed]\nname='x'\nkind='static'\n[[hosts]]\nname=1\n",
        "[testbed]\nname='x'\nkind='static'\n[[hosts]]\n" * 2,
        "x" * 100_000,
        "[testbed]\nname='" + "a" * 10_000 + "'\n",
        "\x00\xff",
    ],
)
def test_bad_testbed_texts(text: str) -> None:
    with pytest.raises(GenieError):
        loads_testbed(text, "bad.toml")


HARNESS = textwrap.dedent(
    """
    import sys
    import atheris

    with atheris.instrument_imports():
        from genie.wire.messages import decode
        from genie.errors import GenieError
        from genie.workload.et_codec import decode_trace

    def one(data: bytes) -> None:
        try:
            decode_trace(data, "<atheris>")
        except GenieError:
            pass
        try:
            decode(data)
        except GenieError:
            pass

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
    """
)


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
def test_atheris_over_et_reader_and_protocol_decoder(tmp_path: Path) -> None:
    seeds = tmp_path / "corpus"
    seeds.mkdir()
    (seeds / "trace").write_bytes(TRACE)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            HARNESS,
            f"-runs={ATHERIS_RUNS}",
            "-max_len=2048",
            "-seed=1",
            "-rss_limit_mb=2048",
            str(seeds),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    tail = proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "Done" in proc.stderr, tail
    print(f"\natheris: {[ln for ln in proc.stderr.splitlines() if 'Done' in ln][-1]}")
