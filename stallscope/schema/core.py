"""Bookkeeping tables: what was ingested, how its clock was set, and every input record that was rejected."""
from .model import Col, Table

NS = "ns since Unix epoch, UTC"

TABLES = [
    Table(
        "sources",
        "One row per ingested file. Every input record is accounted for here: "
        "`records_parsed + records_skipped + records_rejected` is the number of records the parser saw "
        "(trace events for a trace, physical lines for a log, requests plus one per run object for a benchmark file).",
        (
            Col("source_id", "INTEGER", "", "Primary key, referenced by every per-source table."),
            Col("path", "VARCHAR", "", "Absolute path of the file as ingested."),
            Col("format", "VARCHAR", "", "Format detected from the content (not the file name), e.g. `kineto_trace`, `vllm_log`."),
            Col("parser", "VARCHAR", "", "Parser module that read it."),
            Col("parser_version", "VARCHAR", "", "Version of that parser; a new version re-ingests on request."),
            Col("sha256", "VARCHAR", "", "SHA-256 of the file bytes as stored (compressed files hashed compressed); same hash = no-op."),
            Col("size_bytes", "BIGINT", "bytes", "File size on disk."),
            Col("raw_bytes", "BIGINT", "bytes", "Bytes after decompression (equals size_bytes for plain files)."),
            Col("compression", "VARCHAR", "", "`gzip` or NULL."),
            Col("records_parsed", "BIGINT", "records", "Records turned into rows of the canonical tables."),
            Col("records_skipped", "BIGINT", "records", "Records recognised as known noise (flows, metadata, tqdm bars, blank lines, ...)."),
            Col("records_rejected", "BIGINT", "records", "Records that could not be used; each has a row in `rejects`."),
            Col("clock_offset_ns", "BIGINT", "ns", "Offset already added to this source's native times to put them on the common clock (0 = none)."),
            Col("clock_method", "VARCHAR", "", "How the clock was set: `trace_base_time`, `trace_epoch_us`, `log_wallclock`, `matched_server_log`, `bench_date_minus_duration`, ..."),
            Col("clock_residual_ns", "BIGINT", "ns", "Spread of the per-record residuals of the offset estimate (NULL when not estimated)."),
            Col("clock_note", "VARCHAR", "", "Human-readable account of the clock choice (year, zone, anchor, coarseness)."),
            Col("first_ns", "BIGINT", NS, "Earliest instant found in the source, on the common clock."),
            Col("last_ns", "BIGINT", NS, "Latest instant found in the source, on the common clock."),
            Col("mtime_ns", "BIGINT", NS, "File modification time."),
            Col("ingested_ns", "BIGINT", NS, "When this ingest ran."),
            Col("ingest_s", "DOUBLE", "s", "Wall-clock seconds the parse and load took."),
        ),
        group="Bookkeeping",
        per_source=False,
    ),
    Table(
        "derived_steps",
        "Cross-source steps an ingest runs after its files are loaded (today: `clock_alignment`, which puts "
        "benchmark runs on the server's clock), and whether they finished. A load that a step depends on marks the "
        "step `pending` in the load's own transaction; the step marks itself `done` in its own. An ingest "
        "interrupted between the two leaves it `pending`, and the next ingest runs it even when every file is "
        "unchanged, so a crash at any point never leaves a store that differs from a clean ingest.",
        (
            Col("step", "VARCHAR", "", "The step's name, e.g. `clock_alignment` (one row per step)."),
            Col("state", "VARCHAR", "", "`pending` (a source it depends on changed since it last ran) or `done`."),
            Col("depends_on", "VARCHAR", "", "pending: ids of the sources whose load made it pending; done: "
                "`source_id:sha256` of every source in the store when it ran, comma-separated."),
            Col("updated_ns", "BIGINT", NS, "When the state was last written."),
        ),
        group="Bookkeeping",
        per_source=False,
    ),
    Table(
        "rejects",
        "Every input record that could not be used, with where it was and why. Never silent loss.",
        (
            Col("source_id", "INTEGER", "", "The source it came from."),
            Col("line_no", "BIGINT", "line", "1-based physical line number, for line-oriented inputs (NULL otherwise)."),
            Col("byte_offset", "BIGINT", "bytes", "Byte offset in the decompressed input, for non-line inputs such as a cut JSON (NULL otherwise)."),
            Col("record_index", "BIGINT", "", "Index of the record inside its container, e.g. the position in `traceEvents` (NULL otherwise)."),
            Col("reason", "VARCHAR", "", "Why it was rejected, one line."),
            Col("raw", "VARCHAR", "", "The raw record, truncated to 512 characters."),
        ),
        group="Bookkeeping",
    ),
]
