# PRISM: `make run` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo
DB     ?= $(DEMO)/prism.duckdb

.PHONY: install run test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/prism generate --output $(DEMO) --days 28 --clusters 2 --seed 0
	$(BIN)/prism --db $(DB) ingest $(DEMO)/jobs.csv --format jobs-csv
	$(BIN)/prism --db $(DB) ingest $(DEMO)/capacity.csv --format capacity-csv
	$(BIN)/prism --db $(DB) series list
	$(BIN)/prism --db $(DB) series show cluster-0/all/gpus_in_use --tail 12
	$(BIN)/prism --db $(DB) series export --output $(DEMO)/panel.parquet
	$(BIN)/prism --db $(DB) decompose cluster-0/all/gpu_demand --plot $(DEMO)/decompose.png
	$(BIN)/prism --db $(DB) forecast --all --horizon 1d --save --models-dir $(DEMO)/models \
		--reconcile mint_shrink --output $(DEMO)/forecast.csv
	$(BIN)/prism --db $(DB) forecast cluster-0/all/gpu_demand --from-model prism \
		--models-dir $(DEMO)/models --horizon 6h --quantiles 0.5,0.9,0.99
	$(BIN)/prism --db $(DB) backtest --models prism,naive,seasonal_naive \
		--series cluster-0/all/gpu_demand --horizon 1d --windows 3 --summary

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m evaluation.benchmarks.ingest

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
