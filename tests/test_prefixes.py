"""Wrapper prefixes (parsers/prefixes.py): the table's samples, and every real log read through Ray, docker compose,
kubectl, journald, `docker logs --timestamps` and CloudWatch wrappers gives the tables the bare log gives (but for
the wrapper's own `process` name), with
the counts an independent grep of the wrapped file gives."""
from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl
import pytest

import stallscope
from stallscope.parsers import prefixes as X
from stallscope.parsers.patterns import Pattern
from stallscope.schema import TABLES
from conftest import REAL, real
from helpers import physical_lines

FOLDERS = ("vllm", "vllm/excerpts", "tgi", "sglang")
# A terminal copy hard-wrapped at a fixed width: a wrapper in front of each *physical* piece is not what a wrapped
# copy of a wrapped log looks like (the terminal wraps the prefixed line), so only its counts are compared.
HARD_WRAPPED = "v1_0.10.1.1_mp_tp2_qwen7b_startup_hardwrapped_dennislee22.log"


def _months():
    return X.MONTHS.split("|")


def _journald(i: int) -> str:
    # journalctl's short format; the time moves on with the file (it is the journal's, not the engine's).
    s = 16 * 3600 + i // 7
    return f"{_months()[3]} {14 if i % 2 else 14} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d} gpu-node-3 engine[48211]: "


WRAPPERS = {
    "ray": (lambda i: "(RayWorkerWrapper pid=41820, ip=10.244.1.18) ", "RayWorkerWrapper pid=41820, ip=10.244.1.18"),
    # compose colours the service name (ANSI), pads it, and prints a bare bar for an empty line.
    "compose": (lambda i: "\x1b[36mengine-1      |\x1b[0m ", "engine-1"),
    "kubectl": (lambda i: "[pod/engine-7d9f8b-x2x4q/server] ", "pod/engine-7d9f8b-x2x4q/server"),
    "journald": (_journald, "gpu-node-3 engine[48211]"),
    # `docker logs --timestamps`: RFC 3339 UTC with nanoseconds (docker's fixed 9 digits), one space. No stream name.
    "docker_ts": (lambda i: f"2026-03-17T15:{38 + i // 60 % 20:02d}:{i % 60:02d}."
                            f"{(271265228 + 7919 * i) % 10**9:09d}Z ", None),
    # A CloudWatch / syslog export: the collector's local time with its offset, then a tab (behind spaces a line's
    # own indent is lost: test_cloudwatch_tgi_log_with_escapes_and_blank_lines). No stream name.
    "cloudwatch": (lambda i: f"2024-12-10T22:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}+01:00\t", None),
}


def _files(folder: str) -> list[Path]:
    return sorted((REAL / folder).glob("*.log"))


def wrap_bytes(data: bytes, variant: str) -> bytes:
    pre = WRAPPERS[variant][0]
    lines = data.split(b"\n")
    last_open = not data.endswith(b"\n")
    body = lines if last_open else lines[:-1]
    out = [pre(i).encode() + ln for i, ln in enumerate(body)]
    return b"\n".join(out) + (b"" if last_open else b"\n")


# -- the table itself ----------------------------------------------------------------------------------------

def test_every_wrapper_has_samples_that_parse():
    assert {w.name for w in X.WRAPPERS} >= {"ansi", "ray_actor", "docker_compose", "kubectl_prefix", "journald_short",
                                             "ray_dedup"}
    for w in X.WRAPPERS:
        assert isinstance(w.pattern, Pattern) and w.pattern.samples, w.name
        assert not w.pattern.check(), w.pattern.check()


def test_prefix_samples_split_into_wrapper_and_engine_line():
    for w in X.PREFIXES:
        for s in w.pattern.samples:
            got = pl.select(*[e.alias(k) for k, e in zip(("w", "rest"), X.split(pl.lit(s.line)))]).row(0)
            assert got[0] and s.line == got[0] + got[1], (w.name, s.line)
            # What is left starts with the engine's own text, not with another wrapper.
            assert re.match("^" + X.ONE, got[1]) is None, (w.name, got[1])


def test_nested_and_mixed_prefixes_name_one_stream():
    lines = pl.Series([
        "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) INFO 09-10 23:26:40 [x.py:1] m",
        "\x1b[36mvllm-1  |\x1b[0m (APIServer pid=7) INFO 09-10 23:26:40 [x.py:1] m",
        "Apr  4 16:15:00 node7 vllm[9]: [pod/p/c] (Worker_TP0 pid=12) INFO 04-04 16:15:00 [x.py:1] m",
        "Apr  4 16:15:01 node7 vllm[9]: [pod/p/c] (Worker_TP0 pid=12) INFO 04-04 16:15:01 [x.py:1] m",
        "INFO 04-04 16:15:01 [x.py:1] m",
    ])
    clean = pl.select(X.strip_ansi(pl.lit(lines))).to_series()
    w = pl.select(X.split(pl.lit(clean))[0]).to_series()
    assert X.names(w).to_list() == [
        "EngineCore_0 pid=1159 / RayWorkerWrapper pid=1273", "vllm-1 / APIServer pid=7",
        "node7 vllm[9] / pod/p/c / Worker_TP0 pid=12", "node7 vllm[9] / pod/p/c / Worker_TP0 pid=12", None]


def test_dedup_marker_is_counted_and_cut():
    s = pl.Series(["Found nccl from library libnccl.so.2 [repeated 14x across cluster]",
                   "Automatically detected platform cuda. [repeated 8x across cluster] (Ray deduplicates logs by "
                   "default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/x)",
                   "no marker"])
    got = pl.select(X.dedup_count(pl.lit(s)).alias("n"), X.strip_dedup(pl.lit(s)).alias("m"))
    assert got["n"].to_list() == [14, 8, None]
    assert got["m"].to_list() == ["Found nccl from library libnccl.so.2", "Automatically detected platform cuda.",
                                  "no marker"]


def test_dedup_note_on_a_real_ray_log():
    s = stallscope.open(":memory:")
    r = s.ingest([real("vllm/v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log")])[0]
    text = real("vllm/v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log").read_text()
    n = re.findall(r"\[repeated (\d+)x across cluster\]", text)
    assert any(f"{len(n)} line(s) carry Ray's" in x and f"({sum(map(int, n))} repeats" in x for x in r.notes), r.notes
    # The marker is gone from the messages.
    assert s.sql("SELECT count(*) FROM log_events WHERE message LIKE '%across cluster]%'").item() == 0


# -- every real log, wrapped ---------------------------------------------------------------------------------

GREP_VLLM = {
    "stats": re.compile(r"\] (?:Engine \d+: |\d+ Engines Aggregated: )?Avg prompt throughput: "),
    "received": re.compile(r"\] Received request "),
    "finished": re.compile(r"\] Finished request "),
}
GREP_TGI = re.compile(r'(?:: Success$|"message":"Success")')
GREP_SGL = re.compile(r"\b(?:Prefill|Decode) batch[.,(]")


def grep_counts(folder: str, data: bytes) -> dict:
    """Counts read off the file with plain regexes, independent of the parser."""
    lines = data.decode("utf-8", "replace").splitlines()
    if folder.startswith("vllm"):
        return {k: sum(1 for x in lines if rx.search(x)) for k, rx in GREP_VLLM.items()}
    if folder == "tgi":
        return {"success": sum(1 for x in lines if GREP_TGI.search(x))}
    return {"batches": sum(1 for x in lines if GREP_SGL.search(x))}


def parsed_counts(s, folder: str, sid: int) -> dict:
    q = lambda sql: s.sql(sql.replace("$sid", str(sid))).item()  # noqa: E731
    if folder.startswith("vllm"):
        return {"stats": q("SELECT count(*) FROM engine_stats WHERE source_id = $sid"),
                "received": q("SELECT count(*) FROM request_events WHERE source_id = $sid AND event = 'received'"),
                "finished": q("SELECT count(*) FROM request_events WHERE source_id = $sid AND event = 'finished'")}
    if folder == "tgi":
        return {"success": q("SELECT count(*) FROM requests WHERE source_id = $sid AND status = 'ok'")}
    return {"batches": q("SELECT count(*) FROM engine_batches WHERE source_id = $sid")
            + q("SELECT count(*) FROM rejects WHERE source_id = $sid AND reason SIMILAR TO '(Prefill|Decode) batch.*'")}


def _tables(s, sid: int) -> dict:
    """Every table of one source, without the columns a wrapper may change (process, the raw rejected text)."""
    out = {}
    for t in TABLES.values():
        if not t.per_source or t.name == "sources":
            continue
        cols = [c.name for c in t.cols if c.name not in ("source_id", "process", "raw")]
        out[t.name] = s.con.execute(f"SELECT {', '.join(cols)} FROM {t.name} WHERE source_id = ? ORDER BY ALL",
                                    [sid]).fetchall()
    return out


def _ingest_folder(paths: list[Path]):
    s = stallscope.open(":memory:")
    report = s.ingest(paths)
    return s, {Path(r.path).name: r for r in report}


@pytest.fixture(scope="module")
def bare():
    out = {}
    for folder in FOLDERS:
        out[folder] = _ingest_folder(_files(folder))
    yield out
    for s, _ in out.values():
        s.close()


# Every wrapper over every real log runs in the whole suite; the everyday tier keeps two wrappers of each family.
@pytest.mark.parametrize("variant", [v if v in ("compose", "cloudwatch") else pytest.param(v, marks=pytest.mark.slow)
                                     for v in sorted(WRAPPERS)])
@pytest.mark.parametrize("folder", FOLDERS)
def test_wrapped_real_logs_give_the_same_tables(bare, tmp_path, folder, variant):
    files = _files(folder)
    assert files
    wrapped = []
    for f in files:
        p = tmp_path / f.name
        p.write_bytes(wrap_bytes(f.read_bytes(), variant))
        st = f.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # the year of a log without one may come from its mtime
        wrapped.append(p)
    s0, r0 = bare[folder]
    s1, r1 = _ingest_folder(wrapped)
    try:
        for f, p in zip(files, wrapped):
            a, b = r0[f.name], r1[f.name]
            assert b.status == "ingested" and b.format == a.format, (f.name, b.message)
            data = p.read_bytes()
            assert b.parsed + b.skipped + b.rejected == physical_lines(data), f.name
            assert parsed_counts(s1, folder, b.source_id) == grep_counts(folder, data), f.name
            if f.name == HARD_WRAPPED:
                continue
            assert (b.parsed, b.skipped, b.rejected) == (a.parsed, a.skipped, a.rejected), f.name
            assert _tables(s1, b.source_id) == _tables(s0, a.source_id), f.name
            # The wrapper names the stream of every record that had no process of its own; a stamp names none.
            name = WRAPPERS[variant][1]
            procs = s1.sql(f"SELECT DISTINCT process FROM log_events WHERE source_id = {b.source_id}").to_series()
            if name is None:
                bare_procs = s0.sql(f"SELECT DISTINCT process FROM log_events WHERE source_id = {a.source_id}")
                assert sorted(procs.to_list(), key=str) == sorted(bare_procs.to_series().to_list(), key=str), f.name
                continue
            assert procs.len() == 0 or all(p is not None and p.startswith(name) for p in procs), (f.name, procs)
    finally:
        s1.close()


def test_v0_prefix_cache_line_folded_into_its_stats_row():
    """One engine_stats row per V0 stats interval, and each prefix-cache line's numbers on the row of the stats line
    right before it (paired here by a plain scan of the file)."""
    for name, intervals in (("v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log", 22),
                            ("v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log", 92)):
        path = real(f"vllm/{name}")
        lines = path.read_text(encoding="utf-8").splitlines()
        want, last_stats = {}, None
        for i, ln in enumerate(lines, 1):
            if "] Avg prompt throughput: " in ln:
                last_stats = i
            m = re.search(r"\] Prefix cache hit rate: GPU: ([\d.]+)%, CPU: ([\d.]+)%", ln)
            if m:
                want[last_stats] = (float(m.group(1)), float(m.group(2)))
        assert sum(1 for ln in lines if "] Avg prompt throughput: " in ln) == intervals == len(want)
        s = stallscope.open(":memory:")
        s.ingest([path])
        rows = s.sql("SELECT line_no, prefix_cache_hit_rate_pct, cpu_prefix_cache_hit_rate_pct, running_reqs "
                     "FROM engine_stats ORDER BY line_no")
        assert rows.height == intervals
        assert {r[0]: (r[1], r[2]) for r in rows.rows()} == want
        assert rows["running_reqs"].null_count() == 0
        s.close()


def test_prefix_cache_line_without_its_stats_line_keeps_a_row(tmp_path):
    p = tmp_path / "v0.log"
    p.write_text(
        "INFO 04-14 16:15:00 [metrics.py:488] Avg prompt throughput: 9.0 tokens/s, Avg generation throughput: 22.1 "
        "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: "
        "0.0%.\n"
        "INFO 04-14 16:15:00 [metrics.py:504] Prefix cache hit rate: GPU: 10.00%, CPU: 0.00%\n"
        "INFO 04-14 16:15:03 [engine.py:1] something else\n"
        "INFO 04-14 16:15:05 [metrics.py:504] Prefix cache hit rate: GPU: 20.00%, CPU: 1.00%\n")
    s = stallscope.open(":memory:")
    r = s.ingest([p])[0]
    assert r.status == "ingested"
    rows = s.sql("SELECT line_no, running_reqs, prefix_cache_hit_rate_pct, cpu_prefix_cache_hit_rate_pct "
                 "FROM engine_stats ORDER BY line_no").rows()
    assert rows == [(1, 1, 10.0, 0.0), (4, None, 20.0, 1.0)]


def test_sglang_ray_actor_lines_with_trailing_separators(tmp_path):
    """SGLang as a Ray actor: every line behind `(SGLangEngine pid=N) `, batch lines ending in `, ` or (with the
    line end stripped by the collector) `,`."""
    p = tmp_path / "sgl_ray.log"
    p.write_text(
        "(SGLangEngine pid=41820) [2025-09-01 10:00:00 DP1 TP0] Prefill batch, #new-seq: 1, #new-token: 8, "
        "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, \n"
        "(SGLangEngine pid=41820) [2025-09-01 10:00:01 DP1 TP0] Decode batch, #running-req: 3, #token: 2000, token "
        "usage: 0.01, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0,\n"
        "(SGLangEngine pid=41820) [2025-09-01 10:00:02 DP1 TP0] Decode batch, #running-req: 3, #token: 2120, token "
        "usage: 0.01, cuda graph: True, gen throughput (token/s): 101.50, #queue-req: 0, [repeated 3x across "
        "cluster]\n")
    s = stallscope.open(":memory:")
    r = s.ingest([p])[0]
    assert r.status == "ingested" and r.rejected == 0, r.message
    rows = s.sql("SELECT kind, process, dp_rank, tp_rank, running_reqs, kv_tokens, gen_throughput_tps "
                 "FROM engine_batches ORDER BY line_no").rows()
    assert rows == [("prefill", "SGLangEngine pid=41820", 1, 0, 0, None, None),
                    ("decode", "SGLangEngine pid=41820", 1, 0, 3, 2000, 100.0),
                    ("decode", "SGLangEngine pid=41820", 1, 0, 3, 2120, 101.5)]
    assert any("1 line(s) carry Ray's" in n for n in r.notes), r.notes


def test_vllm_v1_stats_line_with_trailing_separator(tmp_path):
    p = tmp_path / "v1.log"
    p.write_text("(APIServer pid=7) INFO 09-10 23:27:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 "
                 "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
                 "usage: 0.1%, Prefix cache hit rate: 0.0%, \n")
    s = stallscope.open(":memory:")
    s.ingest([p], options=stallscope.parsers.Options(year=2025))
    assert s.sql("SELECT running_reqs, gpu_kv_cache_usage_pct FROM engine_stats").rows() == [(1, 0.1)]


# -- collector stamps: docker logs --timestamps, CloudWatch / syslog exports -----------------------------------------

V2026 = "vllm/excerpts/v1_2026_apiserver_loggers259_prefill_saturated_pr37307.log"
F800_NAME = "vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"


def _docker_ts(i: int) -> str:
    return f"2026-03-17T15:38:{10 + i // 2:02d}.{(271265228 + 104729 * i) % 10**9:09d}Z "


def test_docker_timestamped_2026_vllm_log_gives_no_rejects(tmp_path):
    """A 2026 vLLM API server log as `docker logs --timestamps` prints it: the real 2026 stats lines, each followed
    by a real uvicorn access line of the 800-request log behind the `(APIServer pid=N) ` prefix vLLM V1 puts on its
    API server's output. Before the stamp was a wrapper, every access line was read as a continuation."""
    stats = real(V2026).read_text().splitlines()
    access = [x for x in real(F800_NAME).read_text().splitlines()
              if x.startswith("INFO:     ") and "HTTP/1.1" in x][:len(stats)]
    assert len(access) == len(stats) == 5
    lines = [x for pair in zip(stats, ("(APIServer pid=11574) " + a for a in access)) for x in pair]
    p = tmp_path / "vllm_docker.log"
    p.write_text("".join(_docker_ts(i) + x + "\n" for i, x in enumerate(lines)))
    s = stallscope.open(":memory:")
    r = s.ingest([p])[0]
    assert r.status == "ingested" and r.format == "vllm_log" and r.rejected == 0, r.message
    assert s.sql("SELECT count(*) FROM engine_stats").item() == 5
    got = s.sql("SELECT http_method, http_path, http_status FROM log_events WHERE kind = 'access' ORDER BY line_no")
    want = [re.search(r'"([A-Z]+) (\S+) HTTP/1.1" (\d+)', a).groups() for a in access]
    assert got.rows() == [(m, path, int(st)) for m, path, st in want]
    assert s.sql("SELECT DISTINCT process FROM log_events").to_series().to_list() == ["APIServer pid=11574"]


TGI_HEAD = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z) ( ?(?:TRACE|DEBUG|INFO|WARN|ERROR)) (.*?)(: )(.*)$")
TGI_COLOURS = {"TRACE": "35", "DEBUG": "34", "INFO": "32", "WARN": "33", "ERROR": "31"}


def _cloudwatch_export(data: bytes) -> tuple[bytes, dict[int, int]]:
    """A TGI log as a CloudWatch export shows it: TGI's colours (tracing-subscriber: dim time, coloured level, dim
    target) with the escape byte printed as `#033`, each record (a line with TGI's head, or a JSON line, with its
    continuation lines) as one event behind the collector's local time and spaces, a blank line between events.
    Also returns where each original line went (old line number -> new)."""
    out, where, n = [], {}, 0
    lines = data.decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, ln in enumerate(lines, 1):
        m = TGI_HEAD.match(ln)
        starts = m is not None or ln.startswith('{"timestamp"') or i == 1
        if m:
            lvl = m.group(2).strip()
            ln = (f"#033[2m{m.group(1)}#033[0m #033[{TGI_COLOURS[lvl]}m{m.group(2)}#033[0m "
                  f"#033[2m{m.group(3)}#033[0m#033[2m:#033[0m {m.group(5)}")
        if starts:
            if out:
                out.append("")
                n += 1
            ln = f"2024-12-10T22:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}+01:00    " + ln
        out.append(ln)
        n += 1
        where[i] = n
    return ("\n".join(out) + "\n").encode(), where


def _tables_renumbered(s, sid: int, where: dict[int, int] | None) -> dict:
    """Every table of one source without `process` and `raw`, line numbers mapped through `where`."""
    out = {}
    for t in TABLES.values():
        if not t.per_source or t.name == "sources":
            continue
        cols = [c.name for c in t.cols if c.name not in ("source_id", "process", "raw")]
        rows = s.con.execute(f"SELECT {', '.join(cols)} FROM {t.name} WHERE source_id = ?", [sid]).fetchall()
        if where is not None:
            rows = [tuple(_renumber(c, v, where) for c, v in zip(cols, r)) for r in rows]
        out[t.name] = sorted(rows, key=repr)
    return out


def _renumber(col: str, v, where: dict[int, int]):
    """A line number, or a request id made of one (`L<line>`, TGI requests that print no id), moved by `where`."""
    if col == "line_no" and v is not None:
        return where.get(v, v)
    if col in ("request_id", "server_request_id") and isinstance(v, str) and re.fullmatch(r"L\d+", v):
        return f"L{where.get(int(v[1:]), int(v[1:]))}"
    return v


@pytest.mark.parametrize("path", _files("tgi"), ids=lambda p: p.name[:40])
def test_cloudwatch_tgi_log_with_escapes_and_blank_lines(path, tmp_path):
    data = path.read_bytes()
    wrapped, where = _cloudwatch_export(data)
    assert b"+01:00    " in wrapped
    p = tmp_path / path.name
    p.write_bytes(wrapped)
    s0, s1 = stallscope.open(":memory:"), stallscope.open(":memory:")
    a, b = s0.ingest([path])[0], s1.ingest([p])[0]
    assert b.status == "ingested" and b.format == a.format == "tgi_log", b.message
    assert (b.parsed, b.rejected) == (a.parsed, a.rejected)
    assert b.parsed + b.skipped + b.rejected == physical_lines(wrapped)
    assert _tables_renumbered(s1, b.source_id, None) == _tables_renumbered(s0, a.source_id, where)


def test_escapes_printed_as_text_read_like_ansi_codes(tmp_path):
    """rsyslog writes the escape byte as the text `#033`: the real coloured vLLM log so escaped gives the tables
    the log with its real escape bytes gives."""
    src = real("vllm/v1_0.10.1.1_ray_tp4_gptoss120b_startup_ansi_dennislee22.log")
    data = src.read_bytes()
    assert data.count(b"\x1b[") > 100
    p = tmp_path / src.name
    p.write_bytes(data.replace(b"\x1b", b"#033"))
    os.utime(p, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns))
    s0, s1 = stallscope.open(":memory:"), stallscope.open(":memory:")
    a, b = s0.ingest([src])[0], s1.ingest([p])[0]
    assert b.status == "ingested" and b.format == a.format == "vllm_log", b.message
    assert (b.parsed, b.skipped, b.rejected) == (a.parsed, a.skipped, a.rejected)
    assert _tables_renumbered(s1, b.source_id, None) == _tables_renumbered(s0, a.source_id, None)
    assert s1.sql("SELECT count(*) FROM log_events WHERE message LIKE '%#033%'").item() == 0
