"""Prometheus metrics as input: `/metrics` scrapes (text 0.0.4, OpenMetrics) and the HTTP API's query JSON.

Tables: `metric_samples` (one row per sample line or API point), `metric_families` (HELP/TYPE/UNIT), and
`metric_scrapes` (the scrapes of a text file and how each one's time is known). Line formats: prometheus_patterns.py.

Text files are read as one polars frame (every step a column expression; the label sets, which repeat in every
scrape, are parsed once per distinct text). prometheus-client's parser was measured against it and not used: on 100
concatenated real vLLM scrapes (40,500 samples) it took 2.0 s to parse alone where this whole ingest takes 1.6 s,
it stops at the first bad line without saying where, and it accepts a series twice. Memory is about 12x the file
(98 MB of scrapes: 1.2 GB, 26 s). How a file splits into scrapes, in this order:
- `# EOF` (OpenMetrics) ends a scrape; a line that states only a time (`MARKER`: what `date; curl …/metrics` loops
  write) starts one, taken at that time;
- otherwise a family declared again (its `# HELP` or `# TYPE` a k-th time since the last marker) starts the k-th
  scrape: an exposition declares each family once. A scrape that declares no family at all is not split from the
  one before it (its samples then count as duplicates).
A sample's `ts_ns` is its own timestamp (0.0.4 prints ms, OpenMetrics seconds: told apart by magnitude, any value
at or above 1e11 being ms), else its scrape's time: the marker's, else the latest timestamp its samples print, else
unknown (NULL). `metric_scrapes.time_from` says which.

Rejected, with their line: a line that is neither a sample, a declaration, a comment nor blank (a cut line), a
value or timestamp that is not a number, a non-finite value where only counts make sense (counters and the
`_bucket`/`_count`/`_sum`/`_total`/`_created` samples; NaN and ±Inf stay legal for gauges and summary quantiles, where
Prometheus clients print them), a label set that does not parse or repeats a label, the second and later copies of
one series in one scrape (with the same timestamp, or none), and a histogram bucket whose count is below a lower
bucket's in the same scrape.
**Counter resets are data, not rejects:** a counter or histogram that falls between two scrapes (a restart) is kept
as printed; the views over windows treat a decrease as a reset.
"""
from __future__ import annotations

import re

import duckdb
import polars as pl

from stallscope.errors import InputError

from .base import InputFile, ParseContext, Parser
from .lines import frame_lines
from .prometheus_patterns import EOF, HELP, LABEL_PAIR, MARKER, NAME, PATTERNS, SAMPLE, TYPE, TYPES, UNIT

__all__ = ["PARSER", "PATTERNS", "label_sets", "sniff_api", "sniff_text"]

# Sample-name suffixes that belong to a declared family, and those whose values are counts or sums (never NaN/Inf).
FAMILY_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_info", "_gcount", "_gsum")
COUNT_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_gcount", "_gsum")
_MS_FROM = 1e11  # a sample timestamp at or above this is in ms (year 5138 in seconds, 1973 in ms)

_HEAD_LINES = 400


# =====================================================================================================================
# Sniffing
# =====================================================================================================================

def _head_lines(head: bytes) -> list[str]:
    lines = head.decode("utf-8", "replace").splitlines()
    if len(head) >= 1 << 16 and lines:
        lines = lines[:-1]  # the head may cut its last line
    return lines[:_HEAD_LINES]


def sniff_text(head: bytes) -> tuple[str, float] | None:
    """Most non-blank lines of the head are samples, declarations or scrape markers."""
    lines = [x for x in _head_lines(head) if x.strip()]
    if not lines:
        return None
    decl = sum(1 for x in lines if HELP.compiled.search(x) or TYPE.compiled.search(x) or UNIT.compiled.search(x))
    samples = sum(1 for x in lines if _numeric_sample(x))
    other = sum(1 for x in lines if EOF.compiled.search(x) or MARKER.compiled.search(x))
    share = (decl + samples + other) / len(lines)
    fmt = "openmetrics_text" if any(EOF.compiled.search(x) or UNIT.compiled.search(x) for x in lines) \
        else "prometheus_text"
    # A `# TYPE name counter` line appears in no log: with it, half the lines suffice (a damaged scrape is still a
    # scrape, read with its bad lines rejected); without declarations nearly all lines must be samples.
    if decl and samples and share >= 0.5:
        return fmt, 0.95
    # Without declarations (`curl …/metrics | grep vllm:` pasted), nearly every line must be a sample.
    if samples >= 2 and share >= 0.98:
        return fmt, 0.7
    return None


_NUMBER = re.compile(r"^(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?[Ii]nf|NaN)$")


def _numeric_sample(line: str) -> bool:
    """A sample line whose value is a number (a text line such as `Successful requests: 10` fits the sample
    shape with `requests:` as its value)."""
    m = SAMPLE.compiled.search(line)
    return m is not None and _NUMBER.match(m.group("value")) is not None


def sniff_api(head: bytes) -> tuple[str, float] | None:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if h[:1] == b"{" and b'"resultType"' in h and b'"status"' in h and b'"result"' in h:
        return "prometheus_api_json", 0.95
    return None


# =====================================================================================================================
# Text: lines → kinds, scrapes, families, samples
# =====================================================================================================================

def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Per line: `kind` (blank, comment, eof, marker, help, type, unit, sample, bad) and the fields of each kind."""
    t = pl.col("text")
    hash_ = t.str.starts_with("#")
    decl_word = t.str.extract(r"^#[ \t]+(HELP|TYPE|UNIT)[ \t]", 1)
    kind = (pl.when(pl.col("bad_utf8")).then(pl.lit("bad_utf8"))
            .when(t.str.contains(r"^[ \t]*$")).then(pl.lit("blank"))
            .when(hash_ & t.str.contains(EOF.regex)).then(pl.lit("eof"))
            .when(t.str.contains(MARKER.regex)).then(pl.lit("marker"))
            .when(decl_word == "HELP").then(pl.when(t.str.contains(HELP.regex)).then(pl.lit("help"))
                                            .otherwise(pl.lit("bad_decl")))
            .when(decl_word == "TYPE").then(pl.when(t.str.contains(TYPE.regex)).then(pl.lit("type"))
                                            .otherwise(pl.lit("bad_decl")))
            .when(decl_word == "UNIT").then(pl.when(t.str.contains(UNIT.regex)).then(pl.lit("unit"))
                                            .otherwise(pl.lit("bad_decl")))
            .when(hash_).then(pl.lit("comment"))
            .otherwise(pl.lit("sample")))
    df = df.with_columns(kind.alias("kind"))
    is_decl = pl.col("kind").is_in(["help", "type", "unit"])
    fam = t.str.extract(r"^#[ \t]+(?:HELP|TYPE|UNIT)[ \t]+(" + NAME + ")", 1)
    return df.with_columns(
        pl.when(is_decl).then(fam).alias("family"),
        pl.when(pl.col("kind") == "type").then(t.str.extract(TYPE.regex, 2).str.to_lowercase()).alias("type"),
        pl.when(pl.col("kind") == "help").then(t.str.extract(HELP.regex, 2)).alias("help"),
        pl.when(pl.col("kind") == "unit").then(t.str.extract(UNIT.regex, 2)).alias("unit"))


def _scrapes(df: pl.DataFrame) -> pl.DataFrame:
    """`seg` (parts between markers and `# EOF`s) and `sis` (the scrape within its part: a family's k-th
    declaration opens the k-th scrape), both in file order."""
    k = pl.col("kind")
    seg = ((k == "marker").cast(pl.Int64).cum_sum()
           + (k == "eof").cast(pl.Int64).cum_sum().shift(1, fill_value=0))
    df = df.with_columns(seg.alias("seg"))
    decl = k.is_in(["help", "type"])
    occ = pl.int_range(pl.len()).over(["seg", "kind", "family"])
    df = df.with_columns(pl.when(decl).then(occ).alias("_occ"))
    return df.with_columns(pl.col("_occ").cum_max().forward_fill().over("seg").fill_null(0).alias("sis")).drop("_occ")


def _samples(df: pl.DataFrame) -> pl.DataFrame:
    """Sample lines → name, label text, value, timestamp text (NULL name: the line is no sample)."""
    g = pl.col("text").str.extract_groups(SAMPLE.regex)
    return df.filter(pl.col("kind") == "sample").with_columns(
        g.struct.field("name").alias("metric"), g.struct.field("labels").fill_null("").alias("ltext"),
        g.struct.field("value").alias("vtext"), g.struct.field("ts").alias("tstext"))


def _unescape(e: pl.Expr) -> pl.Expr:
    """Label-value and HELP escapes (`\\\\`, `\\"`, `\\n`) undone; the escaped backslash first, via a placeholder."""
    return (e.str.replace_all(r"\\\\", "\x00", literal=True).str.replace_all(r'\"', '"', literal=True)
            .str.replace_all(r"\n", "\n", literal=True).str.replace_all("\x00", "\\", literal=True))


def label_sets(texts: pl.Series) -> pl.DataFrame:
    """Distinct label-set texts → lid, keys and values sorted by key (values unescaped), the series' identity as
    text with and without `le` (`lkey`, `lkey_nole`), `le` as text and float, and `error` (NULL when valid)."""
    u = pl.DataFrame({"ltext": texts.unique(maintain_order=True)}).with_row_index("lid")
    pairs = u.select("lid", pl.col("ltext").str.extract_all(LABEL_PAIR).alias("p")).explode("p").with_columns(
        pl.col("p").str.extract(LABEL_PAIR, 1).alias("k"), _unescape(pl.col("p").str.extract(LABEL_PAIR, 2)).alias("v"))
    kv = pl.concat_str(pl.col("k"), pl.lit("\x1f"), pl.col("v"))
    per = pairs.sort("lid", "k", maintain_order=True).group_by("lid", maintain_order=True).agg(
        pl.col("k").drop_nulls().alias("keys"), pl.col("v").drop_nulls().alias("vals"),
        kv.drop_nulls().str.join("\x1e").alias("lkey"),
        kv.filter(pl.col("k") != "le").drop_nulls().str.join("\x1e").alias("lkey_nole"),
        pl.col("v").filter(pl.col("k") == "le").first().alias("le_text"),
        (pl.col("k").drop_nulls().n_unique() != pl.col("k").drop_nulls().len()).alias("repeats"))
    u = u.join(per, on="lid", how="left", maintain_order="left")
    rest = pl.col("ltext").str.replace_all(LABEL_PAIR, "").str.strip_chars(" \t")
    err = (pl.when(rest != "").then(pl.lit("label set does not parse"))
           .when(pl.col("repeats")).then(pl.lit("a label name repeats in one label set")))
    return u.with_columns(_float(pl.col("le_text")).alias("le"), err.alias("error")).select(
        "lid", "ltext", "keys", "vals", "lkey", "lkey_nole", "le_text", "le", "error")


def _float(e: pl.Expr) -> pl.Expr:
    """A Prometheus number (`1.5e+06`, `NaN`, `+Inf`, `-Inf`, `Inf`, any case) → Float64, NULL when it is none."""
    low = e.str.to_lowercase().str.strip_prefix("+")
    return (pl.when(low.is_in(["inf", "infinity"])).then(float("inf"))
            .when(low.is_in(["-inf", "-infinity"])).then(float("-inf"))
            .when(low == "nan").then(float("nan"))
            .when(e.str.contains(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$"))
            .then(e.cast(pl.Float64, strict=False)))


def _ts_ns(e: pl.Expr) -> pl.Expr:
    """A sample timestamp → ns since the epoch: ms (0.0.4) at or above 1e11, else seconds (OpenMetrics); digits
    after the point kept exactly (a float would lose ~100 ns at today's epoch)."""
    g = e.str.extract_groups(r"^(?P<i>[-+]?\d+)(?:\.(?P<f>\d*))?$")
    i = g.struct.field("i").cast(pl.Int64, strict=False)
    f = g.struct.field("f").fill_null("")
    big = i.abs() >= int(_MS_FROM)
    frac_s = f.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64, strict=False)
    frac_ms = f.str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False)
    sign = pl.when(i < 0).then(-1).otherwise(1)
    exact = pl.when(big).then(i * 1_000_000 + sign * frac_ms).otherwise(i * 1_000_000_000 + sign * frac_s)
    approx = e.cast(pl.Float64, strict=False)
    approx = pl.when(approx.abs() >= _MS_FROM).then(approx * 1e6).otherwise(approx * 1e9).round(0).cast(
        pl.Int64, strict=False)
    return pl.when(i.is_not_null()).then(exact).otherwise(approx)


def _marker_ns(df: pl.DataFrame, tz: str) -> pl.Series:
    """Epoch ns of marker lines (only those in `df`): ISO 8601 with or without a zone, epoch seconds, or `date`'s
    default output. A time without a zone, or with a named zone other than UTC/GMT, is in `tz`."""
    g = pl.col("text").str.extract_groups(MARKER.regex)
    iso = g.struct.field("iso").str.replace(",", ".", literal=True).str.replace(" ", "T", literal=True)
    ig = iso.str.extract_groups(r"^(?P<d>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<f>\d+))?(?P<z>Z|[+-]\d\d:?\d\d)?$")
    base = ig.struct.field("d").str.to_datetime("%Y-%m-%dT%H:%M:%S", time_unit="ns", strict=False)
    frac = ig.struct.field("f").fill_null("").str.pad_end(9, "0").cast(pl.Int64, strict=False).fill_null(0)
    z = ig.struct.field("z")
    zs = z.str.replace(":", "", literal=True)
    off_s = (pl.when(z == "Z").then(0).when(z.is_not_null()).then(
        (zs.str.slice(1, 2).cast(pl.Int64) * 3600 + zs.str.slice(3, 2).cast(pl.Int64) * 60)
        * pl.when(zs.str.starts_with("-")).then(-1).otherwise(1)))
    iso_ns = pl.when(z.is_not_null()).then(base.dt.epoch("ns") + frac - off_s * 1_000_000_000).otherwise(
        _local_ns(base, tz) + frac)
    date = g.struct.field("date")
    dz = date.str.extract(r" ([A-Z]{2,5}) \d{4}$", 1)
    dnaive = date.str.replace(r" [A-Z]{2,5}( \d{4})$", "$1").str.replace_all(" +", " ").str.to_datetime(
        "%a %b %d %H:%M:%S %Y", time_unit="ns", strict=False)
    date_ns = pl.when(dz.is_in(["UTC", "GMT"])).then(dnaive.dt.epoch("ns")).otherwise(_local_ns(dnaive, tz))
    ns = pl.coalesce(iso_ns, _ts_ns(g.struct.field("epoch")), date_ns)
    return df.select(ns.alias("marker_ns")).to_series()


def _local_ns(naive: pl.Expr, tz: str) -> pl.Expr:
    if tz == "UTC":
        return naive.dt.epoch("ns")
    return naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.epoch("ns")


def _families(df: pl.DataFrame) -> pl.DataFrame:
    """One row per declared family: its first TYPE, HELP and UNIT in the file, and the line of its first
    declaration."""
    d = df.filter(pl.col("kind").is_in(["help", "type", "unit"]))
    return d.group_by("family", maintain_order=True).agg(
        pl.col("type").drop_nulls().first(), _unescape(pl.col("help").drop_nulls().first()).alias("help"),
        pl.col("unit").drop_nulls().first(), pl.col("line_no").min())


def _with_family(df: pl.DataFrame, fams: pl.DataFrame) -> pl.DataFrame:
    """The declared family of each sample: the last family declared above it, when the sample's name is that
    family's name or the name plus a suffix it may carry (`_bucket`, `_sum`, `_total`, ...); NULL otherwise."""
    last = pl.when(pl.col("kind").is_in(["help", "type", "unit"])).then(pl.col("family")).forward_fill()
    df = df.with_columns(last.alias("_fam"))
    s = df.filter(pl.col("kind") == "sample")
    m, f = pl.col("metric"), pl.col("_fam")
    ok = (m == f) | pl.any_horizontal([m == f + sfx for sfx in FAMILY_SUFFIXES])
    s = _samples(s).with_columns(pl.when(ok).then(f).alias("family"))
    return s.join(fams.select("family", pl.col("type").alias("ftype")), on="family", how="left",
                  maintain_order="left")


class _Rejects:
    """Rejected lines gathered as frames (line_no, reason, raw) and written once."""

    def __init__(self):
        self.parts: list[pl.DataFrame] = []

    def add(self, df: pl.DataFrame, reason: pl.Expr) -> None:
        if df.height:
            self.parts.append(df.select("line_no", reason.cast(pl.String).alias("reason"),
                                        pl.col("text").alias("raw")))

    def write(self, ctx: ParseContext) -> int:
        if not self.parts:
            return 0
        return ctx.write_rejects(pl.concat(self.parts).sort("line_no").to_arrow())


def _check(s: pl.DataFrame, rej: _Rejects) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Samples → (the valid ones, their distinct label sets); every other one goes to `rej` with its reason (one
    reason per line, the first that applies)."""
    bad = s.filter(pl.col("metric").is_null())
    rej.add(bad, pl.lit("not a sample, declaration, comment or blank line (a cut or malformed line)"))
    s = s.filter(pl.col("metric").is_not_null())
    ls = label_sets(s["ltext"])
    s = s.join(ls.select("ltext", "lid", "lkey", "lkey_nole", "le_text", "le", pl.col("error").alias("lerr")),
               on="ltext", how="left", maintain_order="left")
    m = pl.col("metric")
    counts = pl.any_horizontal([m.str.ends_with(x) for x in COUNT_SUFFIXES]) | (pl.col("ftype") == "counter")
    s = s.with_columns(_float(pl.col("vtext")).alias("value"), _ts_ns(pl.col("tstext")).alias("own_ts_ns"))
    reason = (pl.when(pl.col("lerr").is_not_null()).then(pl.col("lerr"))
              .when(pl.col("value").is_null()).then(pl.lit("value is not a number: ") + pl.col("vtext"))
              .when(pl.col("tstext").is_not_null() & pl.col("own_ts_ns").is_null())
              .then(pl.lit("timestamp is not a number: ") + pl.col("tstext"))
              .when(counts & ~pl.col("value").is_finite())
              .then(pl.lit("non-finite value ") + pl.col("vtext") + pl.lit(" in a count or sum (") + m + pl.lit(")"))
              .when(m.str.ends_with("_bucket") & (pl.col("ftype").is_in(["histogram", "gaugehistogram"]))
                    & pl.col("le").is_null())
              .then(pl.lit("histogram bucket without a numeric le label")))
    s = s.with_columns(reason.alias("why"))
    rej.add(s.filter(pl.col("why").is_not_null()), pl.col("why"))
    s = s.filter(pl.col("why").is_null())
    # The same series twice in one scrape: the first copy is kept. Copies with their own, different timestamps are
    # points of one series (a dump or federation output), not duplicates.
    series = ["scrape", "metric", "lkey", "own_ts_ns"]
    s = s.with_columns(pl.int_range(pl.len()).over(series).alias("_dup"),
                       pl.col("line_no").min().over(series).alias("_first"))
    rej.add(s.filter(pl.col("_dup") > 0),
            pl.lit("duplicate series in one scrape (first at line ") + pl.col("_first").cast(pl.String) + pl.lit(")"))
    s = s.filter(pl.col("_dup") == 0)
    # Cumulative buckets never decrease with le within one scrape.
    b = s.filter(m.str.ends_with("_bucket") & pl.col("le").is_not_null())
    if b.height:
        grp = ["scrape", "metric", "lkey_nole", "own_ts_ns"]
        b = b.sort([*grp, "le"]).with_columns(pl.col("value").cum_max().shift(1).over(grp).alias("_below"))
        dec = b.filter(pl.col("value") < pl.col("_below"))
        rej.add(dec, pl.lit("histogram bucket count decreases: le=") + pl.col("le_text") + pl.lit(" counts ")
                + pl.col("vtext") + pl.lit(", below ") + pl.col("_below").cast(pl.String)
                + pl.lit(" counted at a lower le in the same scrape"))
        if dec.height:
            s = s.join(dec.select("line_no"), on="line_no", how="anti", maintain_order="left")
    return s, ls


def _scrape_table(s: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """One row per scrape that holds samples: first line, time and where the time came from."""
    per = s.group_by("scrape", maintain_order=True).agg(
        pl.col("seg").first(), pl.col("sis").first(), pl.col("line_no").min().alias("line_no"),
        pl.len().alias("samples"), pl.col("own_ts_ns").max().alias("max_ts"))
    per = per.join(markers, on="seg", how="left", maintain_order="left")
    mk = pl.col("marker_ns").is_not_null() & (pl.col("sis") == 0)
    return per.with_columns(
        pl.when(mk).then(pl.col("marker_ns")).otherwise(pl.col("max_ts")).alias("ts_ns"),
        pl.when(mk).then(pl.lit("marker")).when(pl.col("max_ts").is_not_null()).then(pl.lit("samples"))
        .otherwise(pl.lit("unknown")).alias("time_from"))


def parse_text(ctx: ParseContext, fmt: str) -> None:
    dec = ctx.input.read_all()
    if dec.error:  # a cut gzip: what came before the cut is read, a partial last line is rejected like any cut line
        ctx.notes.append(dec.error)
    data = bytes(dec.data)
    if not data.endswith(b"\n"):
        data += b"\n"
    ctx.place = "splitting lines"
    df = frame_lines(data, 1) if data.strip() else pl.DataFrame(
        {"line_no": [], "text": [], "bad_utf8": []}, schema={"line_no": pl.Int64, "text": pl.String,
                                                           "bad_utf8": pl.Boolean})
    del data
    ctx.place = "classifying lines"
    df = _scrapes(_classify(df))
    rej = _Rejects()
    rej.add(df.filter(pl.col("kind") == "bad_utf8"), pl.lit("invalid UTF-8"))
    rej.add(df.filter(pl.col("kind") == "bad_decl"), pl.lit("malformed HELP, TYPE or UNIT line"))
    bad_type = df.filter((pl.col("kind") == "type") & ~pl.col("type").is_in(list(TYPES)))
    rej.add(bad_type, pl.lit("unknown metric type ") + pl.col("type"))
    if bad_type.height:
        df = df.with_columns(pl.when(pl.col("kind") == "type").then(
            pl.when(pl.col("type").is_in(list(TYPES))).then(pl.col("kind")).otherwise(pl.lit("rejected")))
            .otherwise(pl.col("kind")).alias("kind"))
    markers = df.filter(pl.col("kind") == "marker")
    markers = markers.with_columns(_marker_ns(markers, ctx.options.tz))
    rej.add(markers.filter(pl.col("marker_ns").is_null()), pl.lit("scrape marker with an impossible time"))
    markers = markers.group_by("seg").agg(pl.col("marker_ns").first())
    fams = _families(df)
    ctx.place = "reading samples"
    s = _with_family(df, fams)
    s = s.with_columns(pl.struct("seg", "sis").rank("dense").cast(pl.Int64).sub(1).alias("scrape"))
    s, ls = _check(s, rej)
    scrapes = _scrape_table(s, markers)
    s = s.join(scrapes.select("scrape", pl.col("ts_ns").alias("scrape_ns")), on="scrape", how="left",
               maintain_order="left")
    ctx.place = "writing samples"
    _write_samples(ctx, s.select("line_no", pl.col("scrape").alias("scrape_index"), "metric", "family", "lid", "le",
                                 "value", pl.coalesce("own_ts_ns", "scrape_ns").alias("ts_ns")), ls)
    ctx.write("metric_families", fams.select(pl.col("family").alias("metric"), "type", "help", "unit", "line_no")
              .to_arrow())
    ctx.write("metric_scrapes", scrapes.select(pl.col("scrape").alias("scrape_index"), "line_no", "ts_ns",
                                               "time_from", "samples").to_arrow())
    n_rej = rej.write(ctx)
    skipped = df.filter(pl.col("kind").is_in(["blank", "comment", "eof"])).height
    # Every line is parsed (a sample, a declaration, a marker), skipped or rejected, never two of these.
    ctx.counts.skipped += skipped
    ctx.counts.parsed += df.height - skipped - n_rej
    _clock(ctx, fmt, scrapes)


def _write_samples(ctx: ParseContext, s: pl.DataFrame, ls: pl.DataFrame) -> None:
    """Samples and their label sets joined in DuckDB: each distinct label set becomes a MAP once, not per row."""
    if s.height == 0:
        return
    con = ctx.con
    con.register("_prom_s", s.to_arrow())
    con.register("_prom_l", ls.select(pl.col("lid").cast(pl.UInt32), "keys", "vals").to_arrow())
    try:
        ctx.write_sql("metric_samples", """
            SELECT s.line_no, s.scrape_index, s.metric, s.family,
                   MAP(coalesce(l.keys, []::VARCHAR[]), coalesce(l.vals, []::VARCHAR[])) AS labels,
                   s.le, s.ts_ns, s.value
            FROM _prom_s s JOIN _prom_l l USING (lid) ORDER BY s.line_no""")
    finally:
        con.unregister("_prom_s")
        con.unregister("_prom_l")


def _clock(ctx: ParseContext, fmt: str, scrapes: pl.DataFrame | None) -> None:
    lo, hi = ctx.con.execute("SELECT min(ts_ns), max(ts_ns) FROM metric_samples WHERE source_id = ?",
                             [ctx.source_id]).fetchall()[0]
    ctx.first_ns, ctx.last_ns = lo, hi
    if fmt == "prometheus_api_json":
        ctx.set_clock("prometheus_api_utc", "unix seconds of the Prometheus HTTP API (UTC)")
        return
    how = {} if scrapes is None else dict(scrapes.group_by("time_from").len().iter_rows())
    if lo is None:
        ctx.set_clock("none", f"{scrapes.height if scrapes is not None else 0} scrape(s) with no time: samples "
                      "carry no timestamp and no line between scrapes states one (ts_ns NULL)")
    else:
        ctx.set_clock("metrics_timestamps", "scrape times from " + ", ".join(
            f"{k} ({v})" for k, v in sorted(how.items())) + "; sample timestamps as printed (UTC)")


# =====================================================================================================================
# The HTTP API's JSON (`/api/v1/query_range`, `/api/v1/query`), one answer object or several (one per line)
# =====================================================================================================================

_SERIES_SHAPE = ('[{"metric": "MAP(VARCHAR, VARCHAR)", "values": "VARCHAR[][]", "value": "VARCHAR[]", '
                 '"histograms": "JSON", "histogram": "JSON"}]')
_COUNT_LIKE = " OR ".join(f"ends_with(coalesce(metric, ''), '{x}')" for x in COUNT_SUFFIXES)


def parse_api(ctx: ParseContext, fmt: str) -> None:
    """Every point of every series becomes a sample; an answer that is an error or not a matrix/vector, and a
    native-histogram series, are one rejected record each; a point whose value or time is no number is rejected
    with its index (`rejects.record_index`: the point's 0-based position in the file). Read by DuckDB's JSON
    functions; an answer above ~20 MB needs more than the ingest's DuckDB memory limit and is loaded a second time
    without it (1M points, 26 MB: 6.8 s in all)."""
    con = ctx.con
    ctx.place = "reading the JSON answer(s)"
    # DuckDB sizes its read buffer by the largest object allowed: the file itself (a compressed one may hold ~20x
    # its size), never more (a larger bound runs out of the ingest's memory limit on a 26 MB answer).
    gz = ctx.input.compression == "gzip"
    biggest = ctx.input.size * 20 if gz else _longest_line(ctx.path)
    args = [str(ctx.path), "gzip" if gz else "none", min(max(1 << 20, biggest + 1024), (1 << 31) - 1)]
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _prom_docs AS
            SELECT row_number() OVER () - 1 AS doc, json AS j
            FROM read_json_objects(?, format = 'auto', compression = ?, maximum_object_size = ?)""", args)
    except Exception as e:  # duckdb raises its own error types for a cut or invalid document
        if isinstance(e, duckdb.OutOfMemoryException):
            raise  # the ingest loads the file again without its memory limit
        raise InputError(f"{ctx.path}: not valid JSON ({str(e).splitlines()[0][:200]})") from None
    try:
        _api_tables(ctx)
    finally:
        con.execute("DROP VIEW IF EXISTS _prom_points")
        for t in ("_prom_docs", "_prom_series", "_prom_ser"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
    _clock(ctx, fmt, None)


def _longest_line(path) -> int:
    """Bytes of the longest line: an export of one answer per line (a fleet's, a day per line) needs a read buffer
    of its largest answer, not of the whole file (which, above ~20 MB, ran out of the ingest's memory limit and was
    read a second time without it: 44 MB of 200 answers, 66 s in all on 2 busy cores)."""
    import numpy as np
    arr = np.memmap(path, dtype=np.uint8, mode="r")
    if not len(arr):
        return 0
    nl = np.flatnonzero(arr == 10)
    ends = np.concatenate([[-1], nl, [len(arr)]])
    return int(np.diff(ends).max())


# Answers are turned into rows a group at a time, each group at most this much JSON: a fleet's export of one answer
# per line then stays within the ingest's DuckDB memory limit (all at once, 23 MB of 200 answers ran out of it and
# was read a second time without the limit).
_CHUNK_BYTES = 2 << 20


def _api_tables(ctx: ParseContext) -> None:
    con = ctx.con
    # One row per answer (a handful, or one per line of a fleet's export): its size, and what makes it unreadable.
    meta = con.execute("""
        SELECT doc, strlen(CAST(j AS VARCHAR)), j->>'$.status', j->>'$.data.resultType',
               coalesce(j->>'$.errorType', ''), coalesce(j->>'$.error', '')
        FROM _prom_docs ORDER BY doc""").fetchall()
    groups, start, acc = [], None, 0
    for doc, size, *_ in meta:
        if start is None:
            start, acc = doc, 0
        acc += size or 0
        if acc >= _CHUNK_BYTES:
            groups.append((start, doc))
            start = None
    if start is not None:
        groups.append((start, meta[-1][0]))
    n_pts = 0
    rejected_pts = 0
    for lo, hi in groups:
        n, r = _api_chunk(ctx, lo, hi, n_pts)
        n_pts += n
        rejected_pts += r
    bad = [(doc, f"answer status {status or 'missing'}: {etype} {err}" if status != "success" else
            f"answer of type {rtype or 'missing'} holds no series (only matrix and vector are read)")
           for doc, _, status, rtype, etype, err in meta if status != "success" or rtype not in ("matrix", "vector")]
    if bad:
        raw = dict(con.execute(f"SELECT doc, left(CAST(j AS VARCHAR), 512) FROM _prom_docs WHERE doc IN "
                               f"({', '.join(str(d) for d, _ in bad)})").fetchall())
        ctx.write_rejects(pl.DataFrame({"record_index": [n_pts + i for i in range(len(bad))],
                                        "reason": [why for _, why in bad], "raw": [raw[d] for d, _ in bad]},
                                       schema={"record_index": pl.Int64, "reason": pl.String,
                                               "raw": pl.String}).to_arrow())
    ctx.counts.parsed += n_pts - rejected_pts


def _api_chunk(ctx: ParseContext, lo: int, hi: int, rec0: int) -> tuple[int, int]:
    """The answers lo..hi (file order) into metric_samples; returns (points, rejected points). `rec0`: the points
    of the answers before, so a rejected point's `record_index` is its position in the file."""
    con = ctx.con
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _prom_series AS
        WITH r AS (SELECT doc, j->>'$.data.resultType' AS rtype, j->'$.data.result' AS result FROM _prom_docs
                   WHERE j->>'$.status' = 'success' AND doc BETWEEN {int(lo)} AND {int(hi)})
        SELECT doc, generate_subscripts(ss, 1) - 1 AS sid, unnest(ss) AS s
        FROM (SELECT doc, from_json(result, '{_SERIES_SHAPE}') AS ss FROM r WHERE rtype IN ('matrix', 'vector'))""")
    # Per series once: its name, labels (a MAP without `__name__`, keys sorted), `le`, its points, and the index of
    # its first point in the file (the points' `rejects.record_index` without a sort over all points).
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _prom_ser AS
        WITH a AS (
            SELECT doc, sid, s.metric['__name__'] AS metric, s.metric AS m,
                   coalesce(s."values", CASE WHEN s."value" IS NOT NULL THEN [s."value"] END, []) AS pts
            FROM _prom_series)
        SELECT doc, sid, metric, m, pts,
               map_from_entries(list_sort(list_filter(map_entries(m), lambda e: e.key <> '__name__'))) AS labels,
               CASE WHEN ends_with(coalesce(metric, ''), '_bucket') THEN TRY_CAST(m['le'] AS DOUBLE) END AS le,
               {int(rec0)} + coalesce(sum(len(pts)) OVER (ORDER BY doc, sid ROWS BETWEEN UNBOUNDED PRECEDING
                                                          AND 1 PRECEDING), 0) AS first_rec
        FROM a""")
    # A view, not a table: the points stream into metric_samples (DuckDB's ingest memory limit holds), and the
    # few rejects are read by a second pass.
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW _prom_points AS
        WITH p AS (
            SELECT doc, metric, labels, le, first_rec + generate_subscripts(pts, 1) - 1 AS rec, unnest(pts) AS pt
            FROM _prom_ser),
        q AS (SELECT *, TRY_CAST(pt[2] AS DOUBLE) AS value, TRY_CAST(pt[1] AS DECIMAL(38, 9)) AS t FROM p)
        SELECT doc, metric, labels, le, rec, pt, value, CAST(t * 1000000000 AS BIGINT) AS ts_ns,
               CASE WHEN len(pt) <> 2 THEN 'a point is not [time, "value"]'
                    WHEN t IS NULL THEN 'time is not a number: ' || pt[1]
                    WHEN value IS NULL THEN 'value is not a number: ' || pt[2]
                    WHEN ({_COUNT_LIKE}) AND NOT isfinite(value)
                      THEN 'non-finite value ' || pt[2] || ' in a count or sum (' || metric || ')'
               END AS why
        FROM q""")
    n_pts = con.execute("SELECT coalesce(sum(len(pts)), 0) FROM _prom_ser").fetchall()[0][0]
    ctx.write_sql("metric_samples", """
        SELECT doc AS scrape_index, metric, labels, le, ts_ns, value FROM _prom_points WHERE why IS NULL""")
    rej = con.sql("""
        SELECT rec AS record_index, why AS reason,
               coalesce(metric, '') || '{' || array_to_string(list_transform(
                 map_entries(labels), lambda e: e.key || '="' || e.value || '"'), ',') || '} '
                 || CAST(pt AS VARCHAR) AS raw
        FROM _prom_points WHERE why IS NOT NULL
        UNION ALL
        SELECT NULL, 'native histogram series (not read: only classic bucket series are)',
               left(CAST(s AS VARCHAR), 512)
        FROM _prom_series WHERE s.histograms IS NOT NULL OR s.histogram IS NOT NULL
        ORDER BY 1 NULLS LAST""").pl()
    if rej.height:
        ctx.write_rejects(rej.to_arrow())
    return int(n_pts), rej.filter(pl.col("record_index").is_not_null()).height


# =====================================================================================================================
# The parser
# =====================================================================================================================

class PrometheusParser(Parser):
    name = "prometheus"
    version = "1"
    formats = ("prometheus_text", "openmetrics_text", "prometheus_api_json")
    duckdb_threads = 1

    def sniff(self, head: bytes, inp: InputFile):
        return sniff_api(head) or sniff_text(head)

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        if fmt == "prometheus_api_json":
            parse_api(ctx, fmt)
        else:
            parse_text(ctx, fmt)


PARSER = PrometheusParser()
