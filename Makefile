# Task runner. Needs only python3 (3.11+) on the machine; everything else goes into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DB ?= demo.duckdb
DEMO ?= sample_traces/unchunked-long-prompt-stall

.PHONY: demo test venv dev docs bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/python -m pip install -q -e .

dev: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,capture]'

# The main job on a bundled sample: ingest it into an embedded DuckDB file and report the stalls it finds.
demo: venv
	rm -f $(DEMO_DB)
	$(BIN)/stallscope ingest $(DEMO) --db $(DEMO_DB)
	$(BIN)/stallscope analyze --db $(DEMO_DB) --slo ttft=2s,tpot=50ms,itl=200ms --json demo-analysis.json

# The whole test suite.
test: dev
	$(BIN)/python -m pytest -q

docs: venv
	$(BIN)/python -m stallscope.schema > docs/schema.md

bench: dev
	$(BIN)/python bench/bench_kineto.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(DEMO_DB) demo-analysis.json .pytest_cache
