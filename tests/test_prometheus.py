"""Prometheus input (parsers/prometheus.py): every real scrape, concatenated scrapes built from them (markers,
OpenMetrics `# EOF`, sample timestamps, none), the HTTP API's JSON, and hostile lines rejected with their position."""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest

import stallscope
from stallscope.parsers import detect, prometheus_patterns as PP
from stallscope.parsers.base import InputFile
from conftest import REAL, real
from helpers import cli, physical_lines

SCRAPES = sorted((REAL / "metrics").glob("*.prom"))
V25 = "metrics/vllm_0.25.1_rtx3090x2_opt125m_tp2_idle_er0080.prom"
SAMPLE_LINE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*[{ ]")


def sample_lines(data: bytes) -> int:
    """Sample lines counted independently of the parser: non-blank lines that are not comments."""
    return sum(1 for x in data.decode().splitlines() if SAMPLE_LINE.match(x))


def ingest(path: Path, **kw):
    s = stallscope.open(":memory:")
    r = s.ingest([path], **kw)[0]
    assert r.ok, r.message
    return s


def one(s, sql: str, params=None):
    return s.sql(sql, params or []).item()


def accounting(s) -> tuple[int, int, int]:
    return s.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources").row(0)


# -- the format table --------------------------------------------------------------------------------------------

def test_patterns_read_their_samples():
    for p in PP.PATTERNS:
        assert p.samples and not p.check(), p.check()


# -- every real scrape -------------------------------------------------------------------------------------------

def test_there_are_real_scrapes():
    assert len(SCRAPES) >= 3, SCRAPES


@pytest.mark.parametrize("path", SCRAPES, ids=lambda p: p.name[:40])
def test_real_scrape_ingests_one_row_per_sample_line(path, tmp_path):
    data = path.read_bytes()
    got = detect(InputFile(path))
    assert got is not None and got[0].name == "prometheus" and got[1] == "prometheus_text"
    r = cli("ingest", path, "--db", tmp_path / "m.duckdb")
    assert r.returncode == 0, r.stderr
    s = ingest(path)
    assert one(s, "SELECT count(*) FROM metric_samples") == sample_lines(data) > 0
    assert one(s, "SELECT count(*) FROM rejects") == 0
    assert sum(accounting(s)) == physical_lines(data)
    # Every declared family, each once; every sample that follows a declaration of its family belongs to it.
    types = re.findall(r"^# TYPE (\S+) (\S+)$", data.decode(), re.M)
    assert sorted(s.sql("SELECT metric, type FROM metric_families").rows()) == sorted(types)
    assert one(s, "SELECT count(*) FROM metric_samples WHERE family IS NULL") == 0


def test_real_vllm_scrape_fields():
    s = ingest(real(V25))
    text = real(V25).read_text()
    buckets = re.findall(r'^vllm:time_to_first_token_seconds_bucket\{.*le="([^"]+)".*\} (\S+)$', text, re.M)
    got = s.sql("SELECT le, value FROM metric_samples WHERE metric = 'vllm:time_to_first_token_seconds_bucket' "
                "ORDER BY line_no").rows()
    assert got == [(float(le), float(v)) for le, v in buckets] and got[-1][0] == math.inf
    assert len(got) == 23  # 22 edges of note §5 and +Inf
    # Labels as a map, sorted, without the name; the two TP ranks' engine label is one engine here.
    assert s.sql("SELECT DISTINCT labels['engine'] AS e FROM metric_samples WHERE metric LIKE 'vllm:%' "
                 "AND labels['engine'] IS NOT NULL").to_series().to_list() == ["0"]
    assert one(s, "SELECT count(*) FROM metric_samples WHERE le IS NOT NULL") == text.count("_bucket{")
    assert one(s, "SELECT type FROM metric_families WHERE metric = 'vllm:iteration_tokens_total'") == "histogram"
    assert one(s, "SELECT family FROM metric_samples WHERE metric = 'vllm:iteration_tokens_total_bucket' LIMIT 1") \
        == "vllm:iteration_tokens_total"
    # One scrape, no time anywhere: stated as unknown, not invented.
    assert s.sql("SELECT scrape_index, ts_ns, time_from, samples FROM metric_scrapes").rows() == [
        (0, None, "unknown", 405)]
    assert one(s, "SELECT count(ts_ns) FROM metric_samples") == 0


def test_help_text_kept_as_printed():
    s = ingest(real("metrics/vllm_v1_0.10-era_dp2_two_engines_http_summaries_deprecated_gpu_prefix_counters_"
                    "vllm22227.prom"))
    assert one(s, "SELECT help FROM metric_families WHERE metric = 'http_request_size_bytes'").endswith(
        "No percentile calculated. ")
    # DP=2: one counter per engine.
    assert s.sql("SELECT labels['engine'], value FROM metric_samples WHERE metric = "
                 "'vllm:gpu_prefix_cache_queries_total' ORDER BY 1").rows() == [("0", 78.0), ("1", 26.0)]


# -- several scrapes in one file ---------------------------------------------------------------------------------

def _v25() -> str:
    return real(V25).read_text()


def _bump(text: str, k: int) -> str:
    """The scrape with every request counter and bucket raised by k (a later scrape of the same server)."""
    return re.sub(r"^(vllm:(?:prompt_tokens_total|time_to_first_token_seconds_bucket)\{[^}]*\}) (\S+)$",
                  lambda m: f"{m.group(1)} {float(m.group(2)) + k}", text, flags=re.M)


MARKERS = {
    # Each as a scrape loop writes it; the time 2026-05-12T07:41:29Z (1778571689 s) + 15 s per scrape.
    "iso": lambda i: f"2026-05-12T07:41:{29 + 15 * i:02d}.5+00:00" if i < 2 else "2026-05-12T09:41:59.5+02:00",
    "date": lambda i: ["Tue May 12 07:41:29 UTC 2026", "Tue May 12 07:41:44 UTC 2026",
                       "Tue May 12 07:41:59 GMT 2026"][i],
    "comment_epoch": lambda i: f"# scrape_time={1778571689 + 15 * i}.5",
}
MARKER_NS = [(1778571689 + 15 * i) * 10**9 for i in range(3)]


@pytest.mark.parametrize("style", sorted(MARKERS))
def test_concatenated_scrapes_with_time_markers(style, tmp_path):
    mk = MARKERS[style]
    p = tmp_path / "scrapes.prom"
    p.write_text("".join(f"{mk(i)}\n{_bump(_v25(), 3 * i)}" for i in range(3)))
    s = ingest(p)
    half = 500_000_000 if style != "date" else 0
    assert s.sql("SELECT scrape_index, ts_ns, time_from, samples FROM metric_scrapes ORDER BY 1").rows() == [
        (i, MARKER_NS[i] + half, "marker", 405) for i in range(3)]
    assert one(s, "SELECT count(*) FROM metric_samples") == 3 * 405
    assert one(s, "SELECT count(*) FROM rejects") == 0
    assert s.sql("SELECT scrape_index, ts_ns - $1 FROM metric_samples WHERE metric = 'vllm:prompt_tokens_total' "
                 "ORDER BY 1", [half]).rows() == [(i, MARKER_NS[i]) for i in range(3)]
    assert sum(accounting(s)) == physical_lines(p.read_bytes())


def test_concatenated_scrapes_without_markers_split_on_redeclared_families(tmp_path):
    p = tmp_path / "scrapes.prom"
    p.write_text("".join(_bump(_v25(), i) for i in range(4)))
    s = ingest(p)
    assert s.sql("SELECT scrape_index, time_from, samples FROM metric_scrapes ORDER BY 1").rows() == [
        (i, "unknown", 405) for i in range(4)]
    assert one(s, "SELECT count(*) FROM rejects") == 0
    # The counter rises scrape after scrape: the series is read in scrape order.
    assert s.sql("SELECT value FROM metric_samples WHERE metric = 'vllm:prompt_tokens_total' ORDER BY scrape_index"
                 ).to_series().to_list() == [0.0, 1.0, 2.0, 3.0]


def test_openmetrics_scrapes_with_eof_and_sample_timestamps(tmp_path):
    """OpenMetrics: seconds timestamps on every sample, `# EOF` after each scrape, a `# UNIT`, an exemplar."""
    body = _v25()
    out = []
    for i in range(2):
        t = f"{1778571689 + 15 * i}.125"
        sc = re.sub(r"^([a-zA-Z_:][^ ]*(?:\{[^}]*\})?) (\S+)$", lambda m: f"{m.group(1)} {m.group(2)} {t}",
                    body, flags=re.M)
        sc = sc.replace("# TYPE vllm:e2e_request_latency_seconds histogram\n",
                        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
                        "# UNIT vllm:e2e_request_latency_seconds seconds\n")
        sc = re.sub(r'^(vllm:e2e_request_latency_seconds_bucket\{[^}]*le="1.0"[^}]*\} \S+ \S+)$',
                    r'\1 # {trace_id="KOO5S4vxi0o"} 0.67 ' + t, sc, flags=re.M)
        out.append(sc + "# EOF\n")
    p = tmp_path / "om.txt"
    p.write_text("".join(out))
    assert detect(InputFile(p))[1] == "openmetrics_text"
    s = ingest(p)
    assert s.sql("SELECT scrape_index, ts_ns, time_from FROM metric_scrapes ORDER BY 1").rows() == [
        (i, (1778571689 + 15 * i) * 10**9 + 125_000_000, "samples") for i in range(2)]
    assert one(s, "SELECT count(*) FROM metric_samples") == 2 * 405
    assert one(s, "SELECT count(DISTINCT ts_ns) FROM metric_samples") == 2
    assert one(s, "SELECT unit FROM metric_families WHERE metric = 'vllm:e2e_request_latency_seconds'") == "seconds"
    assert one(s, "SELECT count(*) FROM rejects") == 0


def test_millisecond_timestamps_of_0_0_4(tmp_path):
    p = tmp_path / "ms.prom"
    p.write_text('# TYPE http_requests_total counter\nhttp_requests_total{method="post",code="200"} 1027 '
                 '1395066363000\nhttp_requests_total{method="post",code="400"} 3 1395066363000\n')
    s = ingest(p)
    assert s.sql("SELECT DISTINCT ts_ns FROM metric_samples").to_series().to_list() == [1395066363000 * 10**6]


def test_counter_reset_across_scrapes_is_data_not_a_reject(tmp_path):
    p = tmp_path / "restart.prom"
    p.write_text(_bump(_v25(), 50) + _bump(_v25(), 2))  # the server restarted between the two scrapes
    s = ingest(p)
    assert one(s, "SELECT count(*) FROM rejects") == 0
    assert s.sql("SELECT value FROM metric_samples WHERE metric = 'vllm:prompt_tokens_total' ORDER BY scrape_index"
                 ).to_series().to_list() == [50.0, 2.0]


def test_sglang_sidecar_underscore_names_blank_lines_integer_values(tmp_path):
    """The 2026 gRPC sidecar's re-export (note §5): `sglang_` names, blank lines between families, integers. Built
    from the real SGLang 0.5 excerpt's families and labels."""
    src = real("metrics/sglang_0.5.x_metrics_engine_type_pp_rank_tp_rank_labels_issue13485.prom").read_text()
    side = re.sub(r"sglang:", "sglang_", src)
    side = re.sub(r"\} (\d+)\.0$", r"} \1", side, flags=re.M).replace("\n# HELP", "\n\n# HELP")
    p = tmp_path / "sidecar.prom"
    p.write_text(side)
    s = ingest(p)
    assert one(s, "SELECT count(*) FROM metric_samples") == 4
    assert s.sql("SELECT metric, value FROM metric_samples ORDER BY line_no").rows()[:2] == [
        ("sglang_num_running_reqs", 1.0), ("sglang_num_used_tokens", 1.0)]
    assert one(s, "SELECT labels['pp_rank'] || '/' || labels['tp_rank'] FROM metric_samples LIMIT 1") == "0/0"
    assert accounting(s) == (12, 3, 0)


# -- hostile input -----------------------------------------------------------------------------------------------

HOSTILE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} NaN
vllm:num_requests_running{engine="1",model_name="m"} +Inf
vllm:num_requests_running{model_name="m",engine="1"} 3
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} NaN
vllm:prompt_tokens_total{engine="1",model_name="m"} -Inf
vllm:prompt_tokens_total{engine="2",model_name="m"} 12

# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="m"} 3.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 9.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1.2.3
vllm:iteration_tokens_total_bucket{engine="1",le="1.0",model_name="m",le="2"} 5.0
vllm:iteration_tokens_total_bucket{engine="1",le="abc",model_name="m"} 5.0
# TYPE vllm:foo nonsense
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 4 soon
vllm:iteration_tokens_total_bucket{engine="1",le="1.0",model_na"""

EXPECTED_REJECTS = {
    5: "duplicate series in one scrape (first at line 4)",
    7: "non-finite value NaN in a count or sum",
    8: "non-finite value -Inf in a count or sum",
    13: "histogram bucket count decreases: le=8.0 counts 3.0, below 5.0",
    16: "value is not a number: 1.2.3",
    17: "a label name repeats in one label set",
    18: "histogram bucket without a numeric le label",
    19: "unknown metric type nonsense",
    20: "not a sample",
    21: "not a sample",
}


def test_hostile_lines_rejected_with_their_line(tmp_path):
    p = tmp_path / "hostile.prom"
    p.write_text(HOSTILE)  # the last line is cut, without a newline
    r = cli("ingest", p, "--db", tmp_path / "h.duckdb")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    s = ingest(p)
    got = dict(s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no").rows())
    assert sorted(got) == sorted(EXPECTED_REJECTS), got
    for line, reason in EXPECTED_REJECTS.items():
        assert got[line].startswith(reason), (line, got[line])
    # NaN and +Inf stay legal in a gauge; the good samples are all there.
    assert s.sql("SELECT line_no FROM metric_samples ORDER BY 1").to_series().to_list() == [3, 4, 9, 12, 14, 15]
    assert math.isnan(one(s, "SELECT value FROM metric_samples WHERE line_no = 3"))
    assert accounting(s) == (len(HOSTILE.splitlines()) - 1 - 10, 1, 10)


def test_not_every_text_is_a_scrape():
    """No real log of the other parsers is taken for a scrape."""
    for folder in ("vllm", "vllm/excerpts", "tgi", "sglang"):
        for f in sorted((REAL / folder).glob("*.log")):
            got = detect(InputFile(f))
            assert got is None or got[0].name != "prometheus", f


# -- the HTTP API's JSON -----------------------------------------------------------------------------------------

def _matrix() -> dict:
    base = 1778571689.478
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "vllm:inter_token_latency_seconds_bucket", "engine": "0", "le": "0.05",
                    "model_name": "m", "instance": "10.0.0.7:8000"},
         "values": [[base, "10"], [base + 15, "12"], [base + 30, "NaN"], [base + 45, "3"]]},
        {"metric": {"__name__": "vllm:num_requests_running", "engine": "1", "model_name": "m"},
         "values": [[base, "+Inf"], [base + 15, "NaN"], [base + 30, "-Inf"], [base + 45, "not-a-number"]]},
        {"metric": {"engine": "0"}, "values": [[base, "0.25"]]}]}}


def test_query_range_matrix_and_vector(tmp_path):
    p = tmp_path / "range.json"
    vector = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "vllm:generation_tokens_total", "engine": "0"}, "value": [1778571700, "1234"]}]}}
    err = {"status": "error", "errorType": "bad_data", "error": "invalid parameter \"query\""}
    p.write_text("\n".join(json.dumps(x) for x in (_matrix(), vector, err)) + "\n")
    assert detect(InputFile(p))[1] == "prometheus_api_json"
    s = ingest(p)
    rows = s.sql("SELECT metric, labels['le'], le, ts_ns, value FROM metric_samples "
                 "WHERE metric LIKE '%_bucket' ORDER BY ts_ns").rows()
    # A bucket that falls (12 -> 3) is a reset: kept. NaN in a bucket is rejected.
    assert [r[:3] for r in rows] == [("vllm:inter_token_latency_seconds_bucket", "0.05", 0.05)] * 3
    assert [r[4] for r in rows] == [10.0, 12.0, 3.0]
    assert [r[3] for r in rows] == [1778571689478000000 + k * 15 * 10**9 for k in (0, 1, 3)]
    g = s.sql("SELECT value FROM metric_samples WHERE metric = 'vllm:num_requests_running' ORDER BY ts_ns"
              ).to_series().to_list()
    assert g[0] == math.inf and math.isnan(g[1]) and g[2] == -math.inf and len(g) == 3
    assert one(s, "SELECT count(*) FROM metric_samples WHERE metric IS NULL") == 1
    assert s.sql("SELECT map_keys(labels) AS k FROM metric_samples WHERE metric = "
                 "'vllm:inter_token_latency_seconds_bucket' LIMIT 1").row(0)[0] == ["engine", "instance", "le",
                                                                                   "model_name"]
    assert s.sql("SELECT value, ts_ns FROM metric_samples WHERE metric = 'vllm:generation_tokens_total'").rows() == [
        (1234.0, 1778571700 * 10**9)]
    rej = s.sql("SELECT record_index, reason FROM rejects ORDER BY record_index").rows()
    assert [(i, r.split(":")[0]) for i, r in rej] == [
        (2, "non-finite value NaN in a count or sum (vllm"), (7, "value is not a number"), (10, "answer status error")]
    assert accounting(s) == (8, 0, 3)


def test_cut_json_is_one_line_error(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text(json.dumps(_matrix())[:300])
    r = cli("ingest", p, "--db", tmp_path / "c.duckdb")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- size --------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_big_scrape_time_grows_linearly(tmp_path):
    """~5 MB and ~20 MB of concatenated scrapes: the time per byte stays about the same (no quadratic step)."""
    one_scrape = _v25()
    times = {}
    for n in (100, 400):
        p = tmp_path / f"big{n}.prom"
        p.write_text("".join(f"# scrape_time={1778571689 + 15 * i}\n{one_scrape}" for i in range(n)))
        t0 = time.perf_counter()
        s = ingest(p)
        times[n] = time.perf_counter() - t0
        assert one(s, "SELECT count(*) FROM metric_samples") == 405 * n
        assert one(s, "SELECT count(*) FROM metric_scrapes") == n
        s.close()
    assert times[400] < 4 * times[100] * 1.8 + 1.0, times


def test_tgi_names_without_help_blank_lines_between_families(tmp_path):
    """TGI's exporter (metrics-exporter-prometheus): `# TYPE` without `# HELP`, a blank line after each family, no
    engine label. Names from TGI's docs/source/reference/metrics.md; built, no real TGI scrape is known."""
    text = ("# TYPE tgi_request_duration histogram\n"
            + "".join(f'tgi_request_duration_bucket{{le="{le}"}} {n}\n'
                      for le, n in (("0.1", 2), ("0.5", 7), ("1", 9), ("+Inf", 10)))
            + "tgi_request_duration_sum 4.75\ntgi_request_duration_count 10\n\n"
            "# TYPE tgi_batch_forward_duration histogram\n"
            'tgi_batch_forward_duration_bucket{method="prefill",le="0.05"} 3\n'
            'tgi_batch_forward_duration_bucket{method="prefill",le="+Inf"} 4\n'
            'tgi_batch_forward_duration_bucket{method="decode",le="0.05"} 80\n'
            'tgi_batch_forward_duration_bucket{method="decode",le="+Inf"} 80\n\n'
            "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n\n")
    p = tmp_path / "tgi.prom"
    p.write_text(text)
    s = ingest(p)
    assert one(s, "SELECT count(*) FROM metric_samples") == 11
    assert s.sql("SELECT metric, type, help FROM metric_families ORDER BY line_no").rows() == [
        ("tgi_request_duration", "histogram", None), ("tgi_batch_forward_duration", "histogram", None),
        ("tgi_queue_size", "gauge", None)]
    assert s.sql("SELECT labels['method'], max(value) FROM metric_samples WHERE family = 'tgi_batch_forward_duration' "
                 "GROUP BY 1 ORDER BY 1").rows() == [("decode", 80.0), ("prefill", 4.0)]
    assert one(s, "SELECT count(*) FROM metric_scrapes") == 1
    assert accounting(s) == (14, 3, 0)


def test_points_of_one_series_with_their_own_timestamps_are_not_duplicates(tmp_path):
    """A dump or federation output repeats a series with a timestamp per point: points, not duplicates; the same
    series at the same time twice is a duplicate; buckets are checked per timestamp."""
    p = tmp_path / "dump.prom"
    p.write_text("# TYPE vllm:num_requests_running gauge\n"
                 + "".join(f'vllm:num_requests_running{{engine="0"}} {k} {1778571689000 + 15000 * k}\n'
                           for k in range(3))
                 + 'vllm:num_requests_running{engine="0"} 9 1778571689000\n'
                 "# TYPE vllm:iteration_tokens_total histogram\n"
                 'vllm:iteration_tokens_total_bucket{le="1.0"} 4 1778571689000\n'
                 'vllm:iteration_tokens_total_bucket{le="+Inf"} 5 1778571689000\n'
                 'vllm:iteration_tokens_total_bucket{le="1.0"} 1 1778571704000\n'
                 'vllm:iteration_tokens_total_bucket{le="+Inf"} 2 1778571704000\n')
    s = ingest(p)
    assert s.sql("SELECT line_no, reason FROM rejects").rows() == [
        (5, "duplicate series in one scrape (first at line 2)")]
    assert s.sql("SELECT value, ts_ns FROM metric_samples WHERE metric = 'vllm:num_requests_running' ORDER BY 2"
                 ).rows() == [(float(k), (1778571689 + 15 * k) * 10**9) for k in range(3)]
    assert one(s, "SELECT count(*) FROM metric_samples WHERE le IS NOT NULL") == 4


def test_marker_without_zone_is_in_the_ingest_zone(tmp_path):
    p = tmp_path / "local.prom"
    p.write_text("".join(f"{t}\n{_v25()}" for t in ("2026-05-12 09:41:29", "Tue May 12 09:41:44 CEST 2026")))
    s = ingest(p, options=stallscope.parsers.Options(tz="Europe/Berlin"))
    assert s.sql("SELECT ts_ns FROM metric_scrapes ORDER BY 1").to_series().to_list() == MARKER_NS[:2]


def test_grepped_paste_without_declarations_is_a_scrape_and_a_text_summary_is_not(tmp_path):
    p = tmp_path / "grep.txt"
    p.write_text('vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
                 'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n')
    assert detect(InputFile(p))[0].name == "prometheus"
    assert one(ingest(p), "SELECT sum(value) FROM metric_samples") == 3.0
    # Lines of a benchmark's text summary fit the sample shape (`Successful requests:` as name and value) but
    # their values are no numbers.
    q = tmp_path / "summary.txt"
    q.write_text("Successful requests:                     10        \nFailed requests:                         0\n"
                 "Maximum concurrency:                     4\n")
    got = detect(InputFile(q))
    assert got is None or got[0].name != "prometheus"
