# Task runner. Needs only python3 (3.11+) on the machine; everything else goes into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DB ?= demo.duckdb
DEMO ?= sample_traces/unchunked-long-prompt-stall

.PHONY: demo test test-fast lint venv dev docs bench clean capture-demo capture-fit chromium

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/python -m pip install -q -e .

dev: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,capture,fleet]'

# The main job on a bundled sample: ingest it into an embedded DuckDB file and write the incident report.
demo: venv
	rm -f $(DEMO_DB)
	$(BIN)/stallscope ingest $(DEMO) --db $(DEMO_DB)
	$(BIN)/stallscope report --db $(DEMO_DB) --slo ttft=2s,tpot=50ms,itl=200ms --out demo-report
	@echo "open demo-report/report.html (self-contained; report.md and analysis.json are next to it)"

# A real capture on this machine's CPU: 20 s of serving in each mode, the two at the same time (one core each,
# so both see the same machine), then the analysis of each and their client-side ITLs side by side.
CAPTURE_DEMO ?= capture-demo
CAPTURE_ARGS ?= --duration 20 --incident long-prompts:count=4,tokens=3072,spacing=1
capture-demo: dev
	rm -rf $(CAPTURE_DEMO)
	$(BIN)/stallscope capture --out $(CAPTURE_DEMO)/unchunked --policy unchunked $(CAPTURE_ARGS) & pid=$$!; \
	$(BIN)/stallscope capture --out $(CAPTURE_DEMO)/chunked --policy chunked --budget 32 $(CAPTURE_ARGS) \
	  && wait $$pid
	for m in unchunked chunked; do echo "== $$m"; \
	  $(BIN)/stallscope analyze $(CAPTURE_DEMO)/$$m --db $(CAPTURE_DEMO)/$$m.duckdb --json $(CAPTURE_DEMO)/$$m-analysis.json \
	    --top 5 || exit 1; done
	$(BIN)/stallscope ingest $(CAPTURE_DEMO)/*/bench_serve.json --db $(CAPTURE_DEMO)/side-by-side.duckdb > /dev/null
	$(BIN)/stallscope sql --db $(CAPTURE_DEMO)/side-by-side.duckdb \
	  "SELECT regexp_extract(s.path, '([a-z]+)/bench_serve.json', 1) AS mode, count(DISTINCT g.request_id) AS requests, \
	          round(median(g.gap_ns) / 1e6, 1) AS itl_p50_ms, round(quantile_cont(g.gap_ns, 0.99) / 1e6, 1) AS itl_p99_ms, \
	          round(max(g.gap_ns) / 1e6, 1) AS worst_gap_ms \
	   FROM token_gaps g JOIN sources s USING (source_id) GROUP BY 1 ORDER BY 1 DESC"

# Does the fitted step model explain real captured step times? One capture per policy, alone on the machine.
CAPTURE_FIT_ARGS ?= --duration 25 --policies chunked:256,unchunked
capture-fit: dev
	$(BIN)/python bench/bench_capture_fit.py $(CAPTURE_FIT_ARGS)

# The whole test suite, on both cores (one file per worker at a time: module fixtures are built once; files handed out
# in tests/conftest.py's order, longest first: xdist's default reorders them by test count, which left the one-test
# 17-point crash file to start last and run alone at the end). The report's browser test needs Debian's chromium: installed here when missing (as root,
# else through sudo); when it cannot be had the browser test fails, it is never skipped.
test: dev chromium
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# Everyday work: the suite without the tests marked slow or needing an extra (torch, Ray, chromium) or fuzzing
# (pyproject.toml lists the markers); it still reads every parser's real samples, runs the analysis views and the CLI.
# Needs only the test dependencies, so from a clean clone it installs neither torch nor Ray (the torch test modules,
# whose tests are all left out, are then collected without it).
FAST_TESTS ?= not (slow or capture or fleet or browser or fuzz)
test-fast: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	STALLSCOPE_ALLOW_NO_TORCH=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "$(FAST_TESTS)"

# The layers and the other import contracts of pyproject.toml's [tool.importlinter] (docs/architecture.md).
lint: dev
	$(BIN)/lint-imports --no-cache

chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then S=; else S=sudo; fi; \
	  command -v apt-get >/dev/null 2>&1 && \
	  $$S env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  $$S env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } || \
	  echo "warning: could not install chromium; tests/test_browser.py will fail"

docs: venv
	$(BIN)/python -m stallscope.schema > docs/schema.md

bench: dev
	$(BIN)/python bench/bench_kineto.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(DEMO_DB) demo-analysis.json demo-report .pytest_cache $(CAPTURE_DEMO) \
	  .grimp_cache .import_linter_cache
