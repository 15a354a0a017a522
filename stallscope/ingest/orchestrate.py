"""Ingest orchestration: find files, detect formats by content, load each source in its own transaction, then run
the cross-source steps (clock alignment) that the loads made pending, each in its own transaction.

Crash consistency: a load marks the derived steps that depend on it `pending` in `derived_steps` within the load's
own transaction, and a step marks itself `done` within its own; so after a crash at any point the next ingest runs
whatever is still pending, even when every file is unchanged, and the store equals a clean ingest's.
"""
from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import interrupts
from ..errors import STORE_CAUSES, InputError, StallscopeError, os_cause
from ..faults import crash_point
from . import align
from .memory import arrow_pool, out_of_memory, store_memory
from ..parsers import InputFile, Options, ParseContext, Parser, detect
from ..schema import TABLES


@dataclass
class IngestResult:
    path: str
    status: str  # ingested | replaced | unchanged | skipped (not an input, found in a directory) | failed
    format: str | None = None
    parser: str | None = None
    source_id: int | None = None
    parsed: int = 0
    skipped: int = 0
    rejected: int = 0
    raw_bytes: int = 0
    seconds: float = 0.0
    message: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status != "failed"


def expand(paths: list[Path]) -> tuple[list[tuple[Path, bool]], list[IngestResult]]:
    """Files named directly, and every non-hidden file under named directories, sorted for a stable order;
    each with whether it was named (True) or found by walking a directory (False)."""
    files: list[tuple[Path, bool]] = []
    missing: list[IngestResult] = []
    for p in paths:
        if p.is_dir():
            files += sorted((f, False) for f in p.rglob("*") if f.is_file()
                            and not any(part.startswith(".") for part in f.relative_to(p).parts))
        elif p.exists():
            files.append((p, True))
        else:
            missing.append(IngestResult(str(p), "failed", message=f"{p}: no such file or directory"))
    seen: dict[Path, int] = {}
    unique: list[tuple[Path, bool]] = []
    for f, named in files:
        r = f.resolve()
        if r not in seen:
            seen[r] = len(unique)
            unique.append((r, named))
        elif named:
            unique[seen[r]] = (r, True)
    return unique, missing


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _classify(inp: InputFile) -> tuple[Parser, str]:
    if inp.size == 0:
        raise InputError(f"{inp.path}: empty file")
    found = detect(inp)
    if found is None:
        head = inp.head(4096)
        if inp.compression == "gzip" and not head:
            raise InputError(f"{inp.path}: gzip stream ends before any data")
        # Kind and size only, never the bytes: a file named by mistake (a key, /etc/shadow) must not reach a
        # terminal log or a shared lake's `_shards.error` through this message.
        kind = ("binary" if b"\x00" in head else "JSON text" if head.lstrip()[:1] in (b"{", b"[") else "text")
        if inp.compression == "gzip":
            kind = f"gzip-compressed {kind}"
        size = f"{inp.size:,} bytes"
        if kind.endswith("binary"):
            raise InputError(f"{inp.path}: {kind} file ({size}), not a trace, log or benchmark result")
        raise InputError(f"{inp.path}: unknown format ({kind}, {size}): not a Kineto trace, vLLM/TGI/SGLang log "
                         f"or benchmark result")
    return found


def check_regular(path: Path) -> None:
    """Refuse, before any open, what is not a regular file: opening a FIFO blocks until a writer comes, and a
    FIFO, socket or device (/dev/zero) has no size or stable content to ingest."""
    import stat

    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a directory" if stat.S_ISDIR(mode) else "not a regular file")
    raise InputError(f"{path}: {kind}, not a regular file; copy its content to a file first")


def _delete_source(con, source_id: int) -> None:
    for t in TABLES.values():
        if t.per_source:
            con.execute(f"DELETE FROM {t.name} WHERE source_id = ?", [source_id])
    con.execute("DELETE FROM sources WHERE source_id = ?", [source_id])


@contextmanager
def duckdb_threads(con, n: int | None):
    """DuckDB runs `n` threads for the duration (`Parser.duckdb_threads`), then as many as before."""
    if n is None:
        yield
        return
    before = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
    con.execute(f"SET threads = {int(n)}")
    try:
        yield
    except BaseException:
        try:
            con.execute(f"SET threads = {before}")
        except Exception:  # noqa: BLE001 - never over the error in flight (stallscope.ingest.memory.store_memory)
            pass
        raise
    con.execute(f"SET threads = {before}")


def _next_source_id(con) -> int:
    return int(con.execute("SELECT coalesce(max(source_id), 0) + 1 FROM sources").fetchall()[0][0])


def _existing(con, digest: str, path: str):
    rows = con.execute("SELECT source_id FROM sources WHERE sha256 = ? ORDER BY path = ? DESC LIMIT 1",
                       [digest, path]).fetchall()
    return int(rows[0][0]) if rows else None


def ingest_one(store, inp: InputFile, parser: Parser, fmt: str, options: Options,
               progress: Callable[[int], None] | None = None, *, point: str = "ingest.file") -> IngestResult:
    con = store.con
    path = str(inp.path)
    same_size = con.execute("SELECT count(*) FROM sources WHERE size_bytes = ?", [inp.size]).fetchall()[0][0]
    if same_size:
        # Probably a re-ingest: settle it by hash before doing any work.
        digest = sha256_file(inp.path)
        hashing = None
        sid = _existing(con, digest, path)
        if sid is not None:
            return IngestResult(path, "unchanged", fmt, parser.name, sid, message="same content already ingested")
    else:
        # New content by size: hash on another core while parsing (hashlib releases the GIL).
        pool = ThreadPoolExecutor(max_workers=1)
        hashing = pool.submit(sha256_file, inp.path)
        pool.shutdown(wait=False)
        digest = ""
    old = con.execute("SELECT source_id FROM sources WHERE path = ?", [path]).fetchall()
    t0 = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    try:
        for (sid,) in old:
            _delete_source(con, sid)
        source_id = _next_source_id(con)
        con.execute(
            "INSERT INTO sources (source_id, path, format, parser, parser_version, sha256, size_bytes, compression, "
            "mtime_ns, ingested_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [source_id, path, fmt, parser.name, parser.version, digest, inp.size, inp.compression,
             inp.path.stat().st_mtime_ns, time.time_ns()])
        ctx = ParseContext(con, source_id, inp, options, progress)
        try:
            # jemalloc for Arrow while parsing: half the system time of mimalloc (stallscope.ingest.memory)
            with arrow_pool(), duckdb_threads(con, parser.duckdb_threads):
                parser.parse(ctx, fmt)
        except StallscopeError:
            raise
        except Exception as e:  # a parser bug: the user gets the file and the place, not the exception
            if store_failure(store, e, path) is not None or out_of_memory(e):
                raise  # not the file's fault: said as what it is by the caller
            raise InputError(internal_failure(path, parser.name, ctx.place, e)) from e
        c = ctx.counts
        if c.parsed == 0:
            raise InputError(f"{path}: nothing usable in this {fmt} file "
                             f"({c.skipped} records skipped as noise, {c.rejected} rejected"
                             + _first_reject(con, source_id) + ")"
                             + (f"; {ctx.notes[0]}" if ctx.notes else ""))
        if hashing is not None:
            digest = hashing.result()
            sid = _existing(con, digest, path)
            if sid is not None:  # the same bytes under another name, found after the fact
                _rollback(con)
                return IngestResult(path, "unchanged", fmt, parser.name, sid,
                                    message="same content already ingested")
        dt = time.perf_counter() - t0
        con.execute(
            "UPDATE sources SET sha256 = ?, records_parsed = ?, records_skipped = ?, records_rejected = ?, "
            "raw_bytes = ?, clock_offset_ns = ?, clock_method = ?, clock_note = ?, clock_residual_ns = ?, "
            "first_ns = ?, last_ns = ?, ingest_s = ? WHERE source_id = ?",
            [digest, c.parsed, c.skipped, c.rejected, getattr(ctx, "raw_bytes", inp.size), ctx.clock_offset_ns,
             ctx.clock_method, ctx.clock_note, ctx.clock_residual_ns, getattr(ctx, "first_ns", None),
             getattr(ctx, "last_ns", None), dt, source_id])
        if old or align.relevant(con, [source_id]):
            mark_pending(con, ALIGNMENT, source_id)
        crash_point(f"{point}.before_commit")
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise
    return IngestResult(path, "replaced" if old else "ingested", fmt, parser.name, source_id, c.parsed, c.skipped,
                        c.rejected, getattr(ctx, "raw_bytes", inp.size), dt, notes=ctx.notes)


@dataclass
class IngestReport:
    results: list[IngestResult]
    notes: list[str]  # from cross-source steps (clock alignment), after every file was loaded

    @property
    def ok(self) -> bool:
        return any(r.status in ("ingested", "replaced", "unchanged") for r in self.results)

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, i: int) -> IngestResult:
        return self.results[i]


def ingest_paths(store, paths: list[Path], *, options: Options | None = None,
                 on_file: Callable[[Path, int], Callable[[int], None] | None] | None = None,
                 on_result: Callable[[IngestResult], None] | None = None) -> IngestReport:
    """Ingest every file under `paths`; failures are reported per file, never raised for a single bad file."""
    if store.read_only:
        raise StallscopeError(f"{store.path} is open read-only")
    options = options or Options()
    files, results = expand(paths)
    planned: list[tuple[InputFile, Parser, str]] = []
    for f, named in files:
        try:
            check_regular(f)
            inp = InputFile(f)
            parser, fmt = _classify(inp)
            planned.append((inp, parser, fmt))
        except (InputError, OSError) as e:
            if named:
                results.append(IngestResult(str(f), "failed", message=_one_line(e)))
            else:
                # A directory also holds READMEs, notes, ground-truth files: not inputs, said so, not fatal.
                results.append(IngestResult(str(f), "skipped", message=f"not an input: {_one_line(e)}"))
    planned.sort(key=lambda x: x[1].order)
    with store_memory(store.con) as mem:  # DuckDB's memory stops growing with the file (stallscope.ingest.memory)
        _load_all(store, planned, options, on_file, on_result, results, mem)
    crash_point("ingest.loaded")
    notes = run_pending_steps(store)
    return IngestReport(results, notes)


def _load_all(store, planned, options, on_file, on_result, results: list[IngestResult], mem) -> None:
    """Each planned file in its own transaction; failures become results, never exceptions. A file whose load
    ran out of DuckDB's ingest memory limit is loaded again without it (`stallscope.ingest.memory.StoreMemory`)."""
    for i, (inp, parser, fmt) in enumerate(planned, 1):
        progress = on_file(inp.path, inp.size) if on_file else None
        point = f"ingest.file{i}"
        crash_point(f"{point}.start")
        progress = _with_crash_point(progress, f"{point}.parsing")
        try:
            try:
                r = ingest_one(store, inp, parser, fmt, options, progress, point=point)
            except Exception as e:
                if not (out_of_memory(e) and mem.lift()):
                    raise
                try:
                    r = ingest_one(store, inp, parser, fmt, options, progress, point=point)
                finally:
                    mem.apply()
        except StallscopeError as e:
            r = IngestResult(str(inp.path), "failed", fmt, parser.name, message=_one_line(e))
        except KeyboardInterrupt:
            raise
        except Exception as e:  # a parser bug must not take the other files down, nor print a traceback
            if interrupts.requested():  # Ctrl-C interrupted its queries: not the file's fault, and the end
                raise KeyboardInterrupt from None
            fatal = store_failure(store, e, str(inp.path))
            if fatal is not None:  # every later file would fail the same way: the ingest ends here
                raise fatal from None
            r = IngestResult(str(inp.path), "failed", fmt, parser.name,
                             message=internal_failure(str(inp.path), parser.name, "loading it into the store", e))
        crash_point(f"{point}.done")
        results.append(r)
        if on_result:
            on_result(r)


# -- derived (cross-source) steps ----------------------------------------------------------------------------

ALIGNMENT = "clock_alignment"
# Each step re-derives its output from the whole store (idempotent) and returns notes for the user.
DERIVED_STEPS: dict[str, Callable[..., list[str]]] = {ALIGNMENT: align.align_store}


def mark_pending(con, step: str, source_id: int) -> None:
    """`step` must run again because `source_id` was loaded or replaced; called inside the load's transaction."""
    prev = con.execute("SELECT depends_on FROM derived_steps WHERE step = ? AND state = 'pending'",
                       [step]).fetchall()
    ids = (prev[0][0] + "," if prev and prev[0][0] else "") + str(int(source_id))
    con.execute("DELETE FROM derived_steps WHERE step = ?", [step])
    con.execute("INSERT INTO derived_steps (step, state, depends_on, updated_ns) VALUES (?, 'pending', ?, ?)",
                [step, ids, time.time_ns()])


def run_pending_steps(store) -> list[str]:
    """Run every pending derived step, each in one transaction with its `done` mark; a step that fails stays
    pending (the next ingest tries it again) and becomes a note: the files themselves are in."""
    con = store.con
    notes: list[str] = []
    pending = [r[0] for r in con.execute(
        "SELECT step FROM derived_steps WHERE state = 'pending' ORDER BY step").fetchall()]
    for step in pending:
        crash_point(f"derive.{step}.start")
        con.execute("BEGIN TRANSACTION")
        try:
            step_notes = DERIVED_STEPS[step](con)
            crash_point(f"derive.{step}.before_commit")
            con.execute("""UPDATE derived_steps SET state = 'done', updated_ns = ?, depends_on =
                             (SELECT string_agg(source_id || ':' || sha256, ',' ORDER BY source_id) FROM sources)
                           WHERE step = ?""", [time.time_ns(), step])
            con.execute("COMMIT")
        except StallscopeError as e:
            _rollback(con)
            notes.append(f"{step.replace('_', ' ')}: {_one_line(e)}")
            continue
        except Exception as e:  # best effort: the files themselves are in, the step runs again next time
            _rollback(con)
            if interrupts.requested():
                raise KeyboardInterrupt from None
            fatal = store_failure(store, e)
            if fatal is not None:
                raise fatal from None
            if out_of_memory(e) or isinstance(e, MemoryError):
                notes.append(f"{step.replace('_', ' ')}: out of memory; the files themselves are in, and the next "
                             "ingest tries it again")
                continue
            notes.append(f"{step.replace('_', ' ')} skipped after an internal error; the files themselves are in, "
                         f"and the next ingest tries it again{_debug_detail(e)}")
            continue
        except BaseException:
            _rollback(con)
            raise
        crash_point(f"derive.{step}.committed")
        notes += step_notes
    return notes


def _with_crash_point(progress, name: str):
    """The progress callback, with a crash point at its first call (inside the parse of a file)."""
    if not os.environ.get("STALLSCOPE_CRASH_AT") and not os.environ.get("STALLSCOPE_CRASH_LOG"):
        return progress
    first = [True]

    def wrapped(done: int) -> None:
        if first[0]:
            first[0] = False
            crash_point(name)
        if progress is not None:
            progress(done)
    return wrapped


def _rollback(con) -> None:
    """Roll the open transaction back without masking the error that got us here: after a failed COMMIT (disk
    full) DuckDB has no transaction left, or refuses every statement once the database is invalidated."""
    try:
        con.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 - the original error is the one the user must see
        pass


def store_failure(store, e: BaseException, path: str | None = None) -> StallscopeError | None:
    """The one-line error when `e` (or an error under it) is the store's file system refusing a write (disk full,
    file size limit, read-only file system, permission) rather than anything about the input: the store file and
    the cause, and that the store keeps what it had (the source's transaction is rolled back)."""
    import duckdb

    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, (OSError, duckdb.IOException, duckdb.FatalException, duckdb.TransactionException)):
            cause = os_cause(e)
            if cause in STORE_CAUSES:
                about = f" while loading {path}" if path else ""
                return StallscopeError(f"cannot write the store {store.path}: {cause}{about}; the store keeps "
                                       f"what it held before")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def internal_failure(path: str, parser: str, place: str, e: BaseException) -> str:
    """The one line a user sees for an unexpected failure: the file and the place in it, not the exception."""
    if isinstance(e, MemoryError) or out_of_memory(e):
        return f"{path}: out of memory while {place}"
    return (f"{path}: {parser} could not read this file: internal error while {place}; please report it"
            f"{_debug_detail(e)}")


def _debug_detail(e: BaseException) -> str:
    """The exception itself only when asked for (STALLSCOPE_DEBUG=1): it means something to a developer only."""
    if os.environ.get("STALLSCOPE_DEBUG"):
        return f" [{type(e).__name__}: {_one_line(e)}]"
    return " (STALLSCOPE_DEBUG=1 shows the details)"


def _first_reject(con, source_id: int) -> str:
    """`; first: <reason> at byte N` for the earliest reject of a source, to say why nothing was usable."""
    row = con.execute("SELECT reason, byte_offset, line_no, record_index FROM rejects WHERE source_id = ? "
                      "ORDER BY coalesce(byte_offset, 0), coalesce(line_no, 0), coalesce(record_index, 0) LIMIT 1",
                      [source_id]).fetchall()
    if not row:
        return ""
    reason, offset, line, index = row[0]
    where = (f" at byte {offset}" if offset is not None else f" on line {line}" if line is not None
             else f" in record {index}" if index is not None else "")
    return f"; first: {reason.splitlines()[0] if reason else 'rejected'}{where}"


def _one_line(e: BaseException) -> str:
    s = str(e).strip() or type(e).__name__
    return s.splitlines()[0]
