"""The agent's log book: rate-limited per kind, sanitised, bounded."""

from __future__ import annotations

from genie_agent.logbook import MAX_KINDS, MAX_LINE, LogBook, clean


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_flood_of_one_kind_is_held_back_and_counted() -> None:
    out: list[str] = []
    clock = Clock()
    book = LogBook(out.append, burst=5, rate=1.0, clock=clock)
    for _ in range(1000):
        book("malformed: junk")
    assert len(out) == 5 and book.suppressed == 995
    book("busy: someone")  # another kind has its own tokens
    assert out[-1] == "busy: someone"
    clock.t += 1.0
    book.tick()
    assert out[-1] == "malformed: 995 similar lines held back (more than 1/s)"
    clock.t += 1.0  # the summary took that second's token
    book("malformed: again")
    assert out[-1] == "malformed: again"


def test_lines_are_one_printable_line() -> None:
    assert clean("a\nb\x1b[2Jc") == "a\\x0ab\\x1b[2Jc"
    assert len(clean("x" * 10_000)) == MAX_LINE


def test_kinds_are_bounded() -> None:
    out: list[str] = []
    book = LogBook(out.append, burst=1, rate=0.0, clock=Clock())
    for i in range(MAX_KINDS * 10):
        book(f"kind{i}: x")
    assert len(book._tokens) <= MAX_KINDS + 1
