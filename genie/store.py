"""The run store: every measured collective instance, in one SQLite file (WAL mode).

Rows are written as each collective finishes (one transaction per Go), so a crash or Ctrl-C
keeps everything measured so far; a run left ``running`` was interrupted.

A run's error and host facts are read back bounded, their control characters escaped (text a
peer sent into an older store never reaches a terminal raw). A run ends by reading itself back
(``verify_run``): a store file deleted or replaced while the run went, or one that lacks its
rows, is "run NOT stored" (never a silent success), and what the run measured is saved to a
recovery file beside the store.

The store never waits without bound: a lock another process holds longer than ``BUSY_S`` is a
``StoreBusy`` error naming the store. Rows are read defensively: a byte-flipped or hand-edited
row is a ``StoreError`` naming the run and the column, never a traceback.

Schema (times in seconds unless the column says ns; sizes in bytes)::

    runs(
      run_id TEXT PRIMARY KEY,      -- "r" + UTC time + random suffix, e.g. r20260102T101500-3fa2
      created_at REAL,              -- unix time the run started
      finished_at REAL,             -- unix time it ended (NULL while running)
      status TEXT,                  -- running | ok | failed | interrupted
      command TEXT,                 -- the command line
      testbed_name TEXT,
      testbed TEXT,                 -- the testbed file's text (to reproduce the run)
      genie_version TEXT,
      host_facts TEXT,              -- JSON: agent -> facts from its hello (CPUs, NICs, MTU...)
      clock_offsets TEXT,           -- JSON: agent -> {offset_ns, uncertainty_ns, rtt_min_ns}
      workload_hash TEXT,           -- hash of the workload, when a run replays one
      meta TEXT,                    -- JSON: anything else (options, placement)
      error TEXT                    -- the error of a failed run
    )
    instances(
      id INTEGER PRIMARY KEY,
      run_id TEXT REFERENCES runs,
      collective TEXT, algorithm TEXT,
      n_ranks INTEGER,
      size INTEGER,                 -- whole buffer (nccl-tests' size)
      chunks INTEGER, streams INTEGER,
      iteration INTEGER,            -- 0.. within its Go (warm-up first)
      warmup INTEGER,               -- 1 = warm-up, not part of the statistics
      start_ns INTEGER, end_ns INTEGER,  -- controller monotonic clock
      time_s REAL,                  -- end - start: the collective's completion time
      step0_spread_ns INTEGER,      -- spread of first-step starts over ranks (-1: not recorded)
      rank_times TEXT,              -- JSON [[rank, start_ns, end_ns], ...]
      program TEXT                  -- JSON of the ProgramSpec
    )
    counters(                       -- NIC and stack counter deltas of each Go (genie.wire.counters)
      id INTEGER PRIMARY KEY,
      run_id TEXT REFERENCES runs,
      go INTEGER,                   -- 0.. the run's Goes that reported counters, in order
      collective TEXT, algorithm TEXT, n_ranks INTEGER, size INTEGER,  -- NULL: an op-list Go
      iterations INTEGER,           -- iterations of the Go, warm-up included
      agent TEXT, source TEXT,      -- who read them, where (rdma:DEV/PORT, ethtool:IF, tcp)
      deltas TEXT,                  -- JSON {counter name: delta}
      samples TEXT                  -- JSON [[ms into the Go, {name: delta so far}], ...]
    )
    calibrations(
      cal_id TEXT PRIMARY KEY,      -- "c" + UTC time + random suffix
      created_at REAL,
      testbed_name TEXT,
      testbed TEXT,                 -- the testbed file's text of the first run it was fit on
      runs TEXT,                    -- JSON [run_id, ...] it was fit on
      doc TEXT                      -- JSON of genie.calibration.model.Calibration
    )

``RunStore`` is the API (the simulator can read measured tables through ``size_times``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from genie import __version__
from genie.errors import StoreBusy, StoreError
from genie.wire.text import clean, clean_value

DEFAULT_STORE = "genie-runs.sqlite"
MAX_STORED_TEXT = 20_000  # characters of a run's error shown (control characters escaped)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, created_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL,
  command TEXT, testbed_name TEXT, testbed TEXT, genie_version TEXT, host_facts TEXT,
  clock_offsets TEXT, workload_hash TEXT, meta TEXT, error TEXT
);
CREATE TABLE IF NOT EXISTS instances (
  id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(run_id),
  collective TEXT NOT NULL, algorithm TEXT NOT NULL, n_ranks INTEGER NOT NULL,
  size INTEGER NOT NULL, chunks INTEGER, streams INTEGER, iteration INTEGER NOT NULL,
  warmup INTEGER NOT NULL, start_ns INTEGER, end_ns INTEGER, time_s REAL NOT NULL,
  step0_spread_ns INTEGER, rank_times TEXT, program TEXT
);
CREATE INDEX IF NOT EXISTS instances_run ON instances(run_id, collective, algorithm, size);
CREATE TABLE IF NOT EXISTS counters (
  id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(run_id), go INTEGER NOT NULL,
  collective TEXT, algorithm TEXT, n_ranks INTEGER, size INTEGER, iterations INTEGER,
  agent TEXT NOT NULL, source TEXT NOT NULL, deltas TEXT NOT NULL, samples TEXT
);
CREATE INDEX IF NOT EXISTS counters_run ON counters(run_id, go);
CREATE TABLE IF NOT EXISTS calibrations (
  cal_id TEXT PRIMARY KEY, created_at REAL NOT NULL, testbed_name TEXT, testbed TEXT,
  runs TEXT, doc TEXT NOT NULL
);
"""


class RunInfo(msgspec.Struct, kw_only=True):
    """One row of ``runs`` with JSON columns decoded."""

    run_id: str
    created_at: float
    finished_at: float | None
    status: str
    command: str
    testbed_name: str
    testbed: str
    genie_version: str
    host_facts: dict[str, Any]
    clock_offsets: dict[str, Any]
    workload_hash: str
    meta: dict[str, Any]
    error: str
    instances: int = 0


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


OPEN_TIMEOUT_S = 10.0  # how long opening waits for another process setting the store up
BUSY_S = 10.0  # how long a statement waits for another process's lock (SQLite busy timeout)
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _error(path: Path, exc: sqlite3.Error, doing: str = "") -> StoreError:
    """The StoreError for ``exc``: StoreBusy when another process held the lock too long."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _BUSY_CODES:
        what = f" to {doing}" if doing else ""
        return StoreBusy(
            f"run store {path} is locked by another process: waited {BUSY_S:g} s{what}"
        )
    return StoreError(f"run store {path}: {exc}")


class RunStore:
    """Read and write runs and their collective instances."""

    def __init__(self, path: str | os.PathLike = DEFAULT_STORE) -> None:
        self.path = Path(path)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                self.db = sqlite3.connect(self.path, timeout=BUSY_S, isolation_level=None)
                self._setup()
                self._identity = _identity(self.path)  # the file this store writes
                return
            except sqlite3.OperationalError as exc:
                # switching to WAL needs the file to itself and SQLite does not wait for that
                # (no busy handler): another process opening the store at the same instant
                # gets "database is locked" at once. Retry, bounded.
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StoreError(f"cannot open run store {self.path}: {exc}") from None
                self.db.close()
                time.sleep(0.02)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open run store {self.path}: {exc}") from None

    def _setup(self) -> None:
        if self.db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exec(self, sql: str, args: Sequence[Any] = (), doing: str = "") -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, args)
        except sqlite3.Error as exc:
            raise _error(self.path, exc, doing) from None

    def _fetch(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """All rows of a query; a corrupt database file is a StoreError, not a traceback."""
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None

    # ---- writing --------------------------------------------------------------------------
    @staticmethod
    def _new_id(prefix: str, now: float) -> str:
        stamp = _dt.datetime.fromtimestamp(now, _dt.UTC).strftime("%Y%m%dT%H%M%S")
        return f"{prefix}{stamp}-{os.urandom(2).hex()}"

    def start_run(
        self,
        command: str,
        *,
        testbed_name: str = "",
        testbed_text: str = "",
        host_facts: dict[str, Any] | None = None,
        clock_offsets: dict[str, Any] | None = None,
        workload_hash: str = "",
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Record a new run (status running) and return its id."""
        now = time.time()
        run_id = self._new_id("r", now)
        self._exec(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                now,
                None,
                "running",
                command,
                testbed_name,
                testbed_text,
                __version__,
                _json(host_facts or {}),
                _json(clock_offsets or {}),
                workload_hash,
                _json(meta or {}),
                "",
            ),
        )
        return run_id

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set columns of a run (JSON columns take dicts)."""
        allowed = {"host_facts", "clock_offsets", "meta", "workload_hash", "testbed", "command"}
        for key, value in fields.items():
            if key not in allowed:
                raise StoreError(f"cannot update column {key!r} of a run")
            v = _json(value) if key in ("host_facts", "clock_offsets", "meta") else value
            self._exec(f"UPDATE runs SET {key}=? WHERE run_id=?", (v, run_id), f"update {run_id}")

    def finish_run(self, run_id: str, status: str = "ok", error: str = "") -> None:
        """Mark a run finished with ``status`` (ok, failed, interrupted)."""
        self._exec(
            "UPDATE runs SET status=?, finished_at=?, error=? WHERE run_id=?",
            (status, time.time(), error, run_id),
            f"finish run {run_id}",
        )

    def add_instances(self, run_id: str, spec: Any, instances: Iterable[Any], streams: int = 1):
        """Store the instances (``genie.controller.results.Instance``) of one Go of ``spec``."""
        from genie.collectives.layout import buffer_bytes

        size = buffer_bytes(spec) if spec.collective != "flow" else spec.size
        prog = _json(spec)
        rows = [
            (
                run_id,
                spec.collective,
                spec.algorithm,
                spec.n_ranks,
                size,
                spec.chunks,
                streams,
                x.iteration,
                int(x.warmup),
                x.start_ns,
                x.end_ns,
                x.time_s,
                x.step0_spread_ns,
                _json(
                    [
                        [r, s, e]
                        for r, s, e in zip(x.ranks, x.rank_start_ns, x.rank_end_ns, strict=True)
                    ]
                ),
                prog,
            )
            for x in instances
        ]
        try:
            with self.db:
                self.db.execute("BEGIN")
                self.db.executemany(
                    "INSERT INTO instances (run_id, collective, algorithm, n_ranks, size, chunks,"
                    " streams, iteration, warmup, start_ns, end_ns, time_s, step0_spread_ns,"
                    " rank_times, program) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    rows,
                )
        except sqlite3.Error as exc:
            raise _error(self.path, exc, f"store instances of {run_id}") from None

    def add_counters(
        self, run_id: str, go: int, spec: Any, iterations: int, sets: dict[str, list[Any]]
    ) -> None:
        """Store one Go's counter deltas (agent -> ``CounterSet``s) under its ``spec`` (None:
        an op-list Go, one iteration of a trace)."""
        if spec is not None:
            from genie.collectives.layout import buffer_bytes

            size = buffer_bytes(spec) if spec.collective != "flow" else spec.size
            what = (spec.collective, spec.algorithm, spec.n_ranks, size)
        else:
            what = (None, None, None, None)
        rows = [
            (
                run_id,
                go,
                *what,
                iterations,
                agent,
                s.source,
                _json(s.deltas),
                _json([[x.t_ms, x.deltas] for x in s.samples]),
            )
            for agent, agent_sets in sorted(sets.items())
            for s in agent_sets
        ]
        try:
            with self.db:
                self.db.execute("BEGIN")
                self.db.executemany(
                    "INSERT INTO counters (run_id, go, collective, algorithm, n_ranks, size,"
                    " iterations, agent, source, deltas, samples)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    rows,
                )
        except sqlite3.Error as exc:
            raise _error(self.path, exc, f"store counters of {run_id}") from None

    def counters(self, run_id: str) -> list[dict[str, Any]]:
        """A run's counter rows in order (columns of ``counters``, ``deltas`` decoded and
        checked: names bounded text, values non-negative ints; StoreError naming the row)."""
        cur = self._exec(
            "SELECT * FROM counters WHERE run_id=? ORDER BY go, id", (self.run(run_id).run_id,)
        )
        cols = [c[0] for c in cur.description]
        try:
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None
        return [_counter_row(run_id, dict(zip(cols, row, strict=True))) for row in rows]

    def verify_run(self, run_id: str, instances: int) -> None:
        """StoreError ("run NOT stored") unless the file at ``path`` is still the one this store
        wrote (same inode) and holds run ``run_id`` with its ``instances`` rows, read back by a
        connection of its own; the run is then saved to a recovery file beside the store."""
        why = self._lost(run_id, instances)
        if why:
            raise StoreError(f"run NOT stored: {why}; {self._recover(run_id)}")

    def _lost(self, run_id: str, instances: int) -> str:
        """Why run ``run_id`` is not in the file at ``path`` ("" when it is, whole)."""
        now = _identity(self.path)
        if now is None:
            return f"the run store {self.path} is gone (deleted while run {run_id} was going)"
        if now != self._identity:
            return f"the run store {self.path} was replaced while run {run_id} was going"
        try:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=BUSY_S)) as db:
                row = db.execute("SELECT status FROM runs WHERE run_id=?", (run_id,)).fetchone()
                (n,) = db.execute(
                    "SELECT COUNT(*) FROM instances WHERE run_id=?", (run_id,)
                ).fetchone()
        except sqlite3.Error as exc:
            return f"the run store {self.path} cannot be read back: {exc}"
        if row is None:
            return f"the run store {self.path} does not hold run {run_id}"
        if n != instances:
            return f"the run store {self.path} holds {n} of run {run_id}'s {instances} instances"
        return ""

    def _recover(self, run_id: str) -> str:
        """Copy what this connection wrote to a recovery file beside the store; say where."""
        dest = self.path.with_name(f"{self.path.name}.{run_id}.recovered.sqlite")
        try:
            with contextlib.closing(sqlite3.connect(dest)) as out:
                self.db.backup(out)
        except (sqlite3.Error, OSError) as exc:
            return f"and it could not be saved to {dest}: {exc}"
        return f"what it measured is saved in {dest} (genie runs show {run_id} --store {dest})"

    # ---- reading --------------------------------------------------------------------------
    def _info(self, row: sqlite3.Row | tuple) -> RunInfo:
        if len(row) != 14:
            raise StoreError(f"run store {self.path}: table runs has unexpected columns")
        (rid, created, finished, status, cmd, tbn, tb, ver, facts, offs, wh, meta, err, n) = row
        name = rid if isinstance(rid, str) else repr(rid)[:40]

        def text(column: str, value: Any) -> str:
            if value is None:
                return ""
            if not isinstance(value, str):
                raise StoreError(f"run {name}: column {column} is corrupt (not text)")
            return value

        def when(column: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise StoreError(f"run {name}: column {column} is corrupt (not a time)")
            if not 0 <= value < 1e11:  # the year 5138: a flipped exponent, not a time
                raise StoreError(f"run {name}: column {column} is corrupt ({value!r})")
            return float(value)

        def when_if(column: str, value: Any) -> float | None:
            return None if value is None else when(column, value)

        def obj(column: str, value: Any) -> dict[str, Any]:
            try:
                out = json.loads(text(column, value) or "{}")
            except (ValueError, RecursionError):
                raise StoreError(f"run {name}: column {column} is corrupt (not JSON)") from None
            if not isinstance(out, dict):
                raise StoreError(f"run {name}: column {column} is corrupt (not an object)")
            return out

        text("run_id", rid)
        if status not in STATUSES:
            raise StoreError(f"run {name}: column status is corrupt ({str(status)[:20]!r})")
        return RunInfo(
            run_id=rid,
            created_at=when("created_at", created),
            finished_at=when_if("finished_at", finished),
            status=status,
            command=text("command", cmd),
            testbed_name=text("testbed_name", tbn),
            testbed=text("testbed", tb),
            genie_version=text("genie_version", ver),
            host_facts=clean_value(obj("host_facts", facts)),  # (older runs stored them raw)
            clock_offsets=obj("clock_offsets", offs),
            workload_hash=text("workload_hash", wh),
            meta=obj("meta", meta),
            error=clean(text("error", err), MAX_STORED_TEXT, keep="\n\t"),
            instances=int(n or 0),
        )

    _RUN_SELECT = (
        "SELECT r.*, (SELECT COUNT(*) FROM instances i WHERE i.run_id = r.run_id) FROM runs r"
    )

    def list_runs(
        self, limit: int | None = None, problems: list[str] | None = None
    ) -> list[RunInfo]:
        """Runs, newest first. With ``problems``, a corrupt row is left out and its one-line
        reason appended there; without, it raises StoreError."""
        sql = self._RUN_SELECT + " ORDER BY created_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        out = []
        for r in self._fetch(sql):
            try:
                out.append(self._info(r))
            except StoreError as exc:
                if problems is None:
                    raise
                problems.append(str(exc))
        return out

    def run(self, run_id: str) -> RunInfo:
        """One run by id (a unique prefix works too); StoreError if there is none."""
        rows = self._fetch(
            self._RUN_SELECT + " WHERE substr(r.run_id, 1, ?) = ? ORDER BY created_at DESC",
            (len(run_id), run_id),  # a prefix, literally (LIKE would take % and _ as wildcards)
        )
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        exact = [r for r in rows if r[0] == run_id]
        if len(rows) > 1 and not exact:
            raise StoreError(f"run id prefix {run_id!r} is ambiguous ({len(rows)} runs)")
        return self._info(exact[0] if exact else rows[0])

    def instances(self, run_id: str, include_warmup: bool = False) -> list[dict[str, Any]]:
        """The instances of a run as dicts (columns of ``instances``; JSON decoded)."""
        cur = self._exec(
            "SELECT * FROM instances WHERE run_id=?"
            + ("" if include_warmup else " AND warmup=0")
            + " ORDER BY id",
            (self.run(run_id).run_id,),
        )
        cols = [c[0] for c in cur.description]
        try:
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None
        return [_instance(run_id, dict(zip(cols, row, strict=True))) for row in rows]

    def size_times(
        self, run_id: str, collective: str | None = None, algorithm: str | None = None
    ) -> dict[int, list[float]]:
        """Measured completion times (s, warm-up excluded) per size of a run."""
        sql = "SELECT size, time_s FROM instances WHERE run_id=? AND warmup=0"
        args: list[Any] = [self.run(run_id).run_id]
        if collective:
            sql += " AND collective=?"
            args.append(collective)
        if algorithm:
            sql += " AND algorithm=?"
            args.append(algorithm)
        out: dict[int, list[float]] = {}
        for size, t in self._fetch(sql + " ORDER BY size, id", args):
            if not _is_int(size) or not _is_number(t):
                raise StoreError(f"run {run_id}: an instance's size or time_s is corrupt")
            out.setdefault(int(size), []).append(float(t))
        return out

    # ---- calibrations --------------------------------------------------------------------
    def add_calibration(
        self, doc: dict[str, Any], *, testbed_name: str, testbed_text: str, runs: Sequence[str]
    ) -> str:
        """Store a calibration (its JSON-ready ``doc``); return its new id (also in the doc)."""
        now = time.time()
        cal_id = self._new_id("c", now)
        doc = {**doc, "cal_id": cal_id, "created_at": now}
        self._exec(
            "INSERT INTO calibrations VALUES (?,?,?,?,?,?)",
            (cal_id, now, testbed_name, testbed_text, _json(list(runs)), _json(doc)),
        )
        return cal_id

    def calibration(self, cal_id: str) -> dict[str, Any]:
        """One calibration's doc by id (a unique prefix works); StoreError if there is none."""
        rows = self._exec(
            "SELECT cal_id, doc FROM calibrations WHERE substr(cal_id, 1, ?) = ?"
            " ORDER BY created_at DESC",
            (len(cal_id), cal_id),
        ).fetchall()
        if not rows:
            raise StoreError(f"no calibration {cal_id!r} in {self.path} (genie calibrate RUN)")
        exact = [r for r in rows if r[0] == cal_id]
        if len(rows) > 1 and not exact:
            raise StoreError(f"calibration id prefix {cal_id!r} is ambiguous ({len(rows)})")
        return json.loads((exact[0] if exact else rows[0])[1])

    def calibrations(self, testbed_name: str | None = None) -> list[dict[str, Any]]:
        """Calibration docs, newest first (only those of ``testbed_name`` if given)."""
        sql, args = "SELECT doc FROM calibrations", []
        if testbed_name is not None:
            sql += " WHERE testbed_name=?"
            args.append(testbed_name)
        rows = self._exec(sql + " ORDER BY created_at DESC", args).fetchall()
        return [json.loads(r[0]) for r in rows]


STATUSES = ("running", "ok", "failed", "interrupted")
_INT_COLUMNS = ("n_ranks", "size", "iteration", "warmup")
_OPTIONAL_INT_COLUMNS = ("chunks", "streams", "start_ns", "end_ns", "step0_spread_ns")
_TEXT_COLUMNS = ("collective", "algorithm")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) < 1e300


def _instance(run_id: str, d: dict[str, Any]) -> dict[str, Any]:
    """One instances row, checked and with its JSON decoded (StoreError naming the column)."""

    def bad(column: str) -> StoreError:
        return StoreError(f"run {run_id}: instance {d.get('id')}: column {column} is corrupt")

    for c in _INT_COLUMNS:
        if not _is_int(d.get(c)):
            raise bad(c)
    for c in _OPTIONAL_INT_COLUMNS:
        if d.get(c) is not None and not _is_int(d[c]):
            raise bad(c)
    for c in _TEXT_COLUMNS:
        if not isinstance(d.get(c), str):
            raise bad(c)
    if not _is_number(d.get("time_s")):
        raise bad("time_s")
    for c, empty in (("rank_times", "[]"), ("program", "{}")):
        value = d.get(c) or empty
        try:
            d[c] = json.loads(value) if isinstance(value, str) else None
        except (ValueError, RecursionError):
            d[c] = None
        if not isinstance(d[c], list if c == "rank_times" else dict):
            raise bad(c)
    return d


MAX_COUNTER_NAMES = 1024  # names of one stored counter row (or sample) read back
MAX_COUNTER_SAMPLES = 1024  # samples of one stored counter row read back


def _counter_row(run_id: str, d: dict[str, Any]) -> dict[str, Any]:
    """One counters row, checked and with its deltas decoded (StoreError naming the column)."""

    def bad(column: str) -> StoreError:
        return StoreError(f"run {run_id}: counters row {d.get('id')}: column {column} is corrupt")

    for c in ("go", "iterations"):
        if not _is_int(d.get(c)) or d[c] < 0:
            raise bad(c)
    for c in ("n_ranks", "size"):
        if d.get(c) is not None and not _is_int(d[c]):
            raise bad(c)
    for c in ("collective", "algorithm"):
        if d.get(c) is not None and not isinstance(d[c], str):
            raise bad(c)
    for c in ("agent", "source"):
        if not isinstance(d.get(c), str):
            raise bad(c)
        d[c] = clean(d[c], 64)
    try:
        deltas = json.loads(d["deltas"]) if isinstance(d.get("deltas"), str) else None
    except (ValueError, RecursionError):
        deltas = None
    if not isinstance(deltas, dict) or not _counts(deltas):
        raise bad("deltas")
    d["deltas"] = {clean(str(k), 64): v for k, v in deltas.items()}
    try:
        samples = json.loads(d.get("samples") or "[]")
    except (ValueError, RecursionError, TypeError):
        samples = None
    if not isinstance(samples, list) or len(samples) > MAX_COUNTER_SAMPLES:
        raise bad("samples")
    for x in samples:
        if not (isinstance(x, list) and len(x) == 2 and _is_int(x[0]) and x[0] >= 0):
            raise bad("samples")
        if not _counts(x[1]):
            raise bad("samples")
    d["samples"] = [[t, {clean(str(k), 64): v for k, v in x.items()}] for t, x in samples]
    return d


def _counts(v: Any) -> bool:
    """True for a dict of at most MAX_COUNTER_NAMES counts (non-negative ints)."""
    return (
        isinstance(v, dict)
        and len(v) <= MAX_COUNTER_NAMES
        and all(_is_int(x) and x >= 0 for x in v.values())
    )


# ---- export -------------------------------------------------------------------------------
EXPORT_COLUMNS = (
    "run_id",
    "collective",
    "algorithm",
    "n_ranks",
    "size",
    "chunks",
    "streams",
    "iteration",
    "warmup",
    "start_ns",
    "end_ns",
    "time_s",
    "step0_spread_ns",
)


def export_rows(store: RunStore, run_id: str, include_warmup: bool = True) -> list[dict[str, Any]]:
    """The instances of a run as flat rows (``EXPORT_COLUMNS``), for CSV or Parquet."""
    return [
        {c: x[c] for c in EXPORT_COLUMNS}
        for x in store.instances(run_id, include_warmup=include_warmup)
    ]


def write_csv(rows: Sequence[dict[str, Any]], out: Any) -> int:
    """Write ``rows`` as CSV (header first) to the text stream ``out``; return the row count."""
    import csv

    w = csv.DictWriter(out, fieldnames=list(EXPORT_COLUMNS), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return len(rows)


def write_parquet(rows: Sequence[dict[str, Any]], path: str | os.PathLike) -> int:
    """Write ``rows`` as a Parquet file (needs pyarrow); return the row count."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError(
            "Parquet export needs pyarrow: install it with `pip install pyarrow` (or export --csv)"
        ) from None
    table = pa.table({c: [r[c] for r in rows] for c in EXPORT_COLUMNS})
    try:
        pq.write_table(table, str(path))
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc}") from None
    return len(rows)
