# Task runner. Needs only python3 (3.11+) on the machine; everything else goes into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DB ?= demo.duckdb
DEMO ?= sample_traces/unchunked-long-prompt-stall

.PHONY: demo test venv dev docs bench clean chromium

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/python -m pip install -q -e .

dev: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'

# The main job on a bundled sample: ingest it into an embedded DuckDB file and write the incident report.
demo: venv
	rm -f $(DEMO_DB)
	$(BIN)/stallscope ingest $(DEMO) --db $(DEMO_DB)
	$(BIN)/stallscope report --db $(DEMO_DB) --slo ttft=2s,tpot=50ms,itl=200ms --out demo-report
	@echo "open demo-report/report.html (self-contained; report.md and analysis.json are next to it)"

# The whole test suite. The report's browser test needs Debian's chromium: installed here when missing (as root,
# else through sudo); when it cannot be had the browser test fails, it is never skipped.
test: dev chromium
	$(BIN)/python -m pytest -q

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
	rm -rf $(VENV) build dist *.egg-info $(DEMO_DB) demo-analysis.json demo-report .pytest_cache
