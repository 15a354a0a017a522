"""The contract between the ingest orchestrator and every parser: file access, the write context, the parser base."""
from __future__ import annotations

import mmap
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

GZIP_MAGIC = b"\x1f\x8b"
RAW_MAX = 512  # characters of a rejected record kept in `rejects.raw`
ROW_GROUP_ROWS = 122_880  # DuckDB's row group size

FAST_LANES_ENV = "STALLSCOPE_FAST_LANES"
# The one switch for every parser's fast lanes: the readers that take most lines of a big file by their layout
# (vLLM's envelope and prompt-id lanes, SGLang's lean and batch-layout lanes, TGI's Success and radix lanes), each
# giving exactly what the parser's generic path gives for the lines it takes. False sends every line the generic
# way: slower, same store, which is what the equality tests (tests/test_*_fast*.py, test_sglang_lean.py) and
# bench/compare_ingest.py check. STALLSCOPE_FAST_LANES=0 turns them off for a process; tests use `fast_lanes`.
# Parsers ask `fast_lanes_on()` at parse time (an imported copy of the flag would not follow the switch).
FAST_LANES = os.environ.get(FAST_LANES_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def fast_lanes_on() -> bool:
    """Whether the parsers take their fast lanes now (FAST_LANES)."""
    return FAST_LANES


@contextmanager
def fast_lanes(on: bool) -> Iterator[None]:
    """Every parser's fast lanes on or off within the block (restored after it): `with fast_lanes(False): ...`."""
    global FAST_LANES
    before, FAST_LANES = FAST_LANES, bool(on)
    try:
        yield
    finally:
        FAST_LANES = before


@dataclass
class Decoded:
    """A whole input decompressed into memory (or mapped, for an uncompressed file), and where it ended early."""

    data: bytes | mmap.mmap
    error: str | None = None  # one line: why the stream ended early
    error_offset: int | None = None  # compressed byte offset of the cut


class InputFile:
    """One input file: content sniffing and (de)compressed access, tolerant of gzip streams that end early."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self.magic = f.read(2)
        self.size = self.path.stat().st_size
        self.compression = "gzip" if self.magic == GZIP_MAGIC else None

    def head(self, n: int = 1 << 16) -> bytes:
        """The first n decompressed bytes (fewer if the file is shorter or its gzip is cut)."""
        if self.compression is None:
            with open(self.path, "rb") as f:
                return f.read(n)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = bytearray()
        with open(self.path, "rb") as f:
            while len(out) < n:
                block = f.read(1 << 16)
                if not block:
                    break
                try:
                    out += d.decompress(block, n - len(out))
                except zlib.error:
                    break
                if d.eof:
                    break
        return bytes(out[:n])

    def read_all(self, mapped: bool = False) -> Decoded:
        """The whole decompressed content; `mapped` maps an uncompressed file instead of copying it (read-only,
        the pages come from the OS cache as they are touched)."""
        if self.compression is None:
            if mapped and self.size:
                with open(self.path, "rb") as f:
                    return Decoded(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            return Decoded(self.path.read_bytes())
        parts: list[bytes] = []
        for block in self.iter_blocks():
            parts.append(block)
        data = b"".join(parts)
        return Decoded(data, self._cut_error, self._cut_offset)

    _cut_error: str | None = None
    _cut_offset: int | None = None

    def iter_blocks(self, size: int = 8 << 20) -> Iterator[bytes]:
        """Decompressed blocks in order; a cut gzip stops early and sets `cut_error`, it never raises."""
        self._cut_error = None
        self._cut_offset = None
        with open(self.path, "rb") as f:
            if self.compression is None:
                while block := f.read(size):
                    yield block
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            consumed = 0
            while True:
                block = f.read(size)
                if not block:
                    break
                consumed += len(block)
                try:
                    out = d.decompress(block)
                except zlib.error as e:
                    self._cut_error = f"corrupt gzip data near compressed byte {consumed}: {e}"
                    self._cut_offset = consumed
                    return
                if out:
                    yield out
                # Concatenated gzip members are legal (gzip -c a b): continue with the next member.
                while d.eof and d.unused_data:
                    rest = d.unused_data
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out = d.decompress(rest)
                    if out:
                        yield out
            tail = d.flush()
            if tail:
                yield tail
            if not d.eof:
                self._cut_error = f"gzip stream ends early (file cut at compressed byte {self.size})"
                self._cut_offset = self.size

    @property
    def cut_error(self) -> str | None:
        return self._cut_error


@dataclass
class Options:
    """Ingest options that some parsers need."""

    year: int | None = None  # for logs whose timestamps carry no year
    tz: str = "UTC"  # zone of log timestamps that carry none
    keep_python_functions: bool = True  # python_function events: needed for vLLM step windows
    chunk_events: int = 400_000  # trace events decoded per batch (bounds memory)


@dataclass
class Counts:
    parsed: int = 0
    skipped: int = 0
    rejected: int = 0


class ParseContext:
    """What a parser sees while it runs: the input, the open transaction, and the tables it may write."""

    def __init__(self, con: "duckdb.DuckDBPyConnection", source_id: int, inp: InputFile, options: Options,
                 progress=None):
        self.con = con
        self.source_id = source_id
        self.input = inp
        self.path = inp.path
        self.options = options
        self.counts = Counts()
        self.clock_offset_ns = 0
        self.clock_method: str | None = None
        self.clock_note: str | None = None
        self.clock_residual_ns: int | None = None
        self._progress = progress
        self.notes: list[str] = []
        # Where the parser is in the file, in words ("parsing events 0-399999"): an unexpected failure is
        # reported with it (stallscope.ingest.orchestrate), never with the internal exception's text.
        self.place = "reading the file"

    # -- writing -----------------------------------------------------------------------------------
    def write(self, table: str, data) -> int:
        """Append rows to a canonical table; columns missing from `data` become NULL, `source_id` is set here."""
        from stallscope.schema import TABLES

        t = TABLES[table]
        if not isinstance(data, pa.Table):
            data = data.to_arrow() if hasattr(data, "to_arrow") else pa.table(data)
        if data.num_rows == 0:
            return 0
        unknown = set(data.column_names) - set(t.names)
        if unknown:
            raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
        if data.num_rows > ROW_GROUP_ROWS and len(data.to_batches()) > 1:
            # DuckDB ends every Arrow batch with a partial row group, and its next checkpoint rewrites runs of
            # partial row groups into full ones: the table written twice. One contiguous batch avoids that.
            data = data.combine_chunks()
        # A relation over the Arrow data, inserted directly: registering a view instead would keep the Arrow
        # buffers alive until the ingest transaction commits (DuckDB holds them for MVCC), doubling memory.
        exprs = [f"{self.source_id}::INTEGER AS source_id"] + [
            f'CAST("{c.name}" AS {c.type}) AS {c.name}' if c.name in data.column_names else f"NULL::{c.type} AS {c.name}"
            for c in t.cols if c.name != "source_id"]
        self.con.from_arrow(data).project(", ".join(exprs)).insert_into(table)
        return data.num_rows

    def write_sql(self, table: str, select_sql: str, params=None) -> int:
        """Append rows produced by a SELECT whose output columns are named after the table's columns."""
        cols = [d[0] for d in self.con.execute(f"SELECT * FROM ({select_sql}) LIMIT 0", params or []).description]
        n = self.con.execute(
            f"INSERT INTO {table} (source_id, {', '.join(cols)}) SELECT {self.source_id}, * FROM ({select_sql})",
            params or []).fetchall()
        return int(n[0][0]) if n else 0

    def reject(self, reason: str, raw: str | bytes | None = None, *, line_no: int | None = None,
               byte_offset: int | None = None, record_index: int | None = None) -> None:
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = bytes(raw[: RAW_MAX * 4]).decode("utf-8", "replace")
        self.con.execute("INSERT INTO rejects VALUES (?, ?, ?, ?, ?, ?)",
                         [self.source_id, line_no, byte_offset, record_index, reason,
                          None if raw is None else raw[:RAW_MAX]])
        self.counts.rejected += 1

    def write_rejects(self, data: pa.Table) -> int:
        """Many rejects at once: columns among line_no, byte_offset, record_index, reason, raw (raw truncated here)."""
        if data.num_rows == 0:
            return 0
        if "raw" in data.column_names:
            import pyarrow.compute as pc
            data = data.set_column(data.column_names.index("raw"), "raw",
                                   pc.utf8_slice_codeunits(data["raw"], 0, RAW_MAX))
        n = self.write("rejects", data)
        self.counts.rejected += n
        return n

    def set_clock(self, method: str, note: str | None = None, offset_ns: int = 0,
                  residual_ns: int | None = None) -> None:
        self.clock_method, self.clock_note = method, note
        self.clock_offset_ns, self.clock_residual_ns = offset_ns, residual_ns

    def progress(self, done_bytes: int) -> None:
        if self._progress is not None:
            self._progress(done_bytes)


class Parser:
    """Base class: a parser declares its name, version and formats, sniffs content, and parses one file."""

    name: str = ""
    version: str = "0"
    formats: tuple[str, ...] = ()
    # Lower runs first within one ingest call: traces and benchmark files (which carry years and absolute
    # clocks) before logs that need them.
    order: int = 50
    # DuckDB's threads while this parser loads a file (None: DuckDB's own setting). A parser that only appends
    # rows sets 1: an append is one thread's work, and a second DuckDB thread competes with the parser's own
    # threads and ends each append with more partial row groups for the commit to rewrite.
    duckdb_threads: int | None = None

    def sniff(self, head: bytes, inp: InputFile) -> tuple[str, float] | None:
        """(format, confidence 0..1) when this parser can read content starting with `head`, else None."""
        raise NotImplementedError

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        raise NotImplementedError


def file_mtime_ns(path: Path) -> int:
    return int(os.stat(path).st_mtime_ns)
