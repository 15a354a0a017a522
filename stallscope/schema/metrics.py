"""Prometheus metrics tables written by the metrics parser (parsers/prometheus.py): samples, families, scrapes."""
from .model import Col, Table

NS = "ns since Unix epoch, UTC"
SRC = Col("source_id", "INTEGER", "", "The file the row came from (`sources.source_id`).")
G = "Metrics: Prometheus scrapes and query exports"

TABLES = [
    Table(
        "metric_samples",
        "One row per sample line of a `/metrics` scrape (text 0.0.4 or OpenMetrics) or per point of a Prometheus "
        "HTTP API answer (`query_range` matrix, `query` vector). Values as printed, cumulative where the metric is: "
        "a counter or histogram that falls between two samples of one series (a restart) is kept as it is, not "
        "rejected; views over windows treat a decrease as a reset.",
        (
            SRC,
            Col("line_no", "BIGINT", "line", "1-based line of the sample in a text scrape (NULL for API JSON)."),
            Col("scrape_index", "INTEGER", "", "0-based scrape of the file the sample belongs to (`metric_scrapes`); "
                "for API JSON the 0-based answer object in the file."),
            Col("metric", "VARCHAR", "", "Sample name as printed (`vllm:time_to_first_token_seconds_bucket`, "
                "`sglang_num_running_reqs`, `tgi_request_duration_count`); NULL for an API series without `__name__`."),
            Col("family", "VARCHAR", "", "The declared family it belongs to (`metric_families.metric`): the name "
                "without `_bucket`/`_sum`/`_count`/`_created`/`_total`; NULL when none was declared."),
            Col("labels", "MAP(VARCHAR, VARCHAR)", "", "Label set, keys sorted, escapes undone, `__name__` removed "
                "(`labels['engine']`, `labels['le']`, `labels['tp_rank']`)."),
            Col("le", "DOUBLE", "", "Upper bound of a histogram bucket (the `le` label as a number, +Inf as "
                "infinity); NULL for other samples."),
            Col("ts_ns", "BIGINT", NS, "The sample's own timestamp, else its scrape's time (`metric_scrapes.ts_ns`); "
                "NULL when unknown."),
            Col("value", "DOUBLE", "", "The value; NaN and ±Inf only where the format allows them (gauges, summary "
                "quantiles, API results of expressions), never in a count, sum or bucket (those are rejected)."),
        ),
        group=G,
    ),
    Table(
        "metric_families",
        "One row per metric family declared in a text scrape (`# TYPE`, `# HELP`, `# UNIT`), first declaration "
        "in the file.",
        (
            SRC,
            Col("metric", "VARCHAR", "", "Family name as declared (`vllm:e2e_request_latency_seconds`)."),
            Col("type", "VARCHAR", "", "`counter`, `gauge`, `histogram`, `summary`, `gaugehistogram`, `info`, "
                "`stateset`, `unknown` or `untyped`; NULL when only HELP was printed."),
            Col("help", "VARCHAR", "", "HELP text as printed (escapes undone; a trailing blank kept)."),
            Col("unit", "VARCHAR", "", "OpenMetrics UNIT; NULL when not declared."),
            Col("line_no", "BIGINT", "line", "Line of the family's first declaration."),
        ),
        group=G,
    ),
    Table(
        "metric_scrapes",
        "One row per scrape (an exposition) in a text file that holds several concatenated scrapes or one, and "
        "how its time is known.",
        (
            SRC,
            Col("scrape_index", "INTEGER", "", "0-based, in file order."),
            Col("line_no", "BIGINT", "line", "Line of its first sample."),
            Col("ts_ns", "BIGINT", NS, "When the scrape was taken; NULL when unknown."),
            Col("time_from", "VARCHAR", "", "`marker` (a line stating the time before it), `samples` (the latest "
                "timestamp its samples print) or `unknown`."),
            Col("samples", "BIGINT", "samples", "Sample rows it gave."),
        ),
        group=G,
    ),
]
