"""The run store: every measured collective instance, in one SQLite file (WAL mode).

Rows are written as each collective finishes (one transaction per Go), so a crash or Ctrl-C
keeps everything measured so far; a run left ``running`` was interrupted.

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
from genie.errors import StoreError

DEFAULT_STORE = "genie-runs.sqlite"

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


class RunStore:
    """Read and write runs and their collective instances."""

    def __init__(self, path: str | os.PathLike = DEFAULT_STORE) -> None:
        self.path = Path(path)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                self.db = sqlite3.connect(self.path, timeout=OPEN_TIMEOUT_S, isolation_level=None)
                self._setup()
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

    def _exec(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, args)
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None

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
            self._exec(f"UPDATE runs SET {key}=? WHERE run_id=?", (v, run_id))

    def finish_run(self, run_id: str, status: str = "ok", error: str = "") -> None:
        """Mark a run finished with ``status`` (ok, failed, interrupted)."""
        self._exec(
            "UPDATE runs SET status=?, finished_at=?, error=? WHERE run_id=?",
            (status, time.time(), error, run_id),
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
            raise StoreError(f"run store {self.path}: {exc}") from None

    # ---- reading --------------------------------------------------------------------------
    def _info(self, row: sqlite3.Row | tuple) -> RunInfo:
        (rid, created, finished, status, cmd, tbn, tb, ver, facts, offs, wh, meta, err, n) = row
        return RunInfo(
            run_id=rid,
            created_at=created,
            finished_at=finished,
            status=status,
            command=cmd or "",
            testbed_name=tbn or "",
            testbed=tb or "",
            genie_version=ver or "",
            host_facts=json.loads(facts or "{}"),
            clock_offsets=json.loads(offs or "{}"),
            workload_hash=wh or "",
            meta=json.loads(meta or "{}"),
            error=err or "",
            instances=n,
        )

    _RUN_SELECT = (
        "SELECT r.*, (SELECT COUNT(*) FROM instances i WHERE i.run_id = r.run_id) FROM runs r"
    )

    def list_runs(self, limit: int | None = None) -> list[RunInfo]:
        """Runs, newest first."""
        sql = self._RUN_SELECT + " ORDER BY created_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._info(r) for r in self._exec(sql).fetchall()]

    def run(self, run_id: str) -> RunInfo:
        """One run by id (a unique prefix works too); StoreError if there is none."""
        rows = self._exec(
            self._RUN_SELECT + " WHERE r.run_id LIKE ? ORDER BY created_at DESC",
            (run_id + "%",),
        ).fetchall()
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
        out = []
        for row in cur.fetchall():
            d = dict(zip(cols, row, strict=True))
            d["rank_times"] = json.loads(d["rank_times"] or "[]")
            d["program"] = json.loads(d["program"] or "{}")
            out.append(d)
        return out

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
        for size, t in self._exec(sql + " ORDER BY size, id", args).fetchall():
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
            "SELECT cal_id, doc FROM calibrations WHERE cal_id LIKE ? ORDER BY created_at DESC",
            (cal_id + "%",),
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
