# PRISM: `make run` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo
DB     ?= $(DEMO)/prism.duckdb
PORT   ?= 8000
SERVE  ?= 1

.PHONY: install run test lint typecheck chromium bench bench-accuracy bench-accuracy-references bench-shapes bench-covariates clean

# make test installs the dev tools and Ray (STAMP); make run only what PRISM needs to run
# (RUN_STAMP): a lighter first run.
RUN_STAMP := $(VENV)/.installed-run

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,distributed]'
	touch $(STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test $(STAMP) -nt pyproject.toml || { $(BIN)/python -m pip install --quiet --upgrade pip \
		&& $(BIN)/python -m pip install --quiet -e .; }
	touch $(RUN_STAMP)

install: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/prism generate --output $(DEMO) --days 28 --clusters 2 --seed 0
	$(BIN)/prism --db $(DB) ingest $(DEMO)/jobs.csv --format jobs-csv
	$(BIN)/prism --db $(DB) ingest $(DEMO)/capacity.csv --format capacity-csv
	$(BIN)/prism --db $(DB) series list
	$(BIN)/prism --db $(DB) series show cluster-0/all/gpus_in_use --tail 12
	$(BIN)/prism --db $(DB) series export --output $(DEMO)/panel.parquet
	$(BIN)/prism --db $(DB) decompose cluster-0/all/gpu_demand --plot $(DEMO)/decompose.png
	$(BIN)/prism --db $(DB) forecast --cluster cluster-0 --horizon 1d --save \
		--models-dir $(DEMO)/models --reconcile mint_shrink --output $(DEMO)/forecast.csv
	$(BIN)/prism --db $(DB) forecast cluster-0/all/gpu_demand --from-model prism \
		--models-dir $(DEMO)/models --horizon 6h --quantiles 0.5,0.9,0.99
	$(BIN)/prism --db $(DB) backtest --models prism,naive,seasonal_naive \
		--cluster cluster-0 --metric gpus_in_use --horizon 1d --windows 7
	$(BIN)/prism --db $(DB) capacity --cluster cluster-0 --horizon 1d --quantile 0.95 --pool \
		--models-dir $(DEMO)/models
	$(BIN)/prism --db $(DB) report --cluster cluster-0 --output $(DEMO)/report.html \
		--models-dir $(DEMO)/models
	$(BIN)/prism --db $(DB) track-record --cluster cluster-0
	@echo ""
	@echo "The REST API serves this store and the models saved above; Ctrl-C stops it"
	@echo "(make run SERVE=0 stops here instead). From another terminal:"
	@echo "  curl -s http://127.0.0.1:$(PORT)/readyz"
	@echo "  curl -s 'http://127.0.0.1:$(PORT)/v1/series?cluster=cluster-0&metric=gpu_demand'"
	@echo "  curl -s 'http://127.0.0.1:$(PORT)/v1/forecast?series_id=cluster-0/all/gpu_demand&horizon=6h&quantiles=0.5,0.9,0.99'"
	@echo "  curl -s --retry 10 -X POST http://127.0.0.1:$(PORT)/v1/forecast -H 'Content-Type: application/json' \\"
	@echo "       -d '{\"series_ids\": [\"cluster-0/all/gpu_demand\", \"cluster-1/all/gpu_demand\"], \"horizon\": \"1d\"}'"
	@echo "  curl -s 'http://127.0.0.1:$(PORT)/v1/capacity?cluster=cluster-0&horizon=1d&quantile=0.95'"
	@echo "  curl -s -X POST 'http://127.0.0.1:$(PORT)/v1/ingest?format=jobs-csv' -F file=@$(DEMO)/jobs.csv"
	@echo "  curl -s http://127.0.0.1:$(PORT)/v1/metrics | grep '^prism_forecast'"
	@echo "  (a series whose model is not fitted yet answers 503 with Retry-After: curl --retry waits it out)"
	@echo "  $(BIN)/prism --db $(DB) series list   (the CLI goes through the server's API while it runs)"
	@echo "  (API docs: http://127.0.0.1:$(PORT)/docs; with PRISM_API_TOKEN set, add"
	@echo "   -H \"Authorization: Bearer \$$PRISM_API_TOKEN\" to the /v1 calls)"
	@if [ "$(SERVE)" != "0" ]; then \
		$(BIN)/prism --db $(DB) serve --host 127.0.0.1 --port $(PORT) --models-dir $(DEMO)/models; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The report's browser test drives Debian's chromium (headless); install it where it is
# missing and apt-get can (root, or passwordless sudo). PRISM_REQUIRE_CHROMIUM makes the test
# fail rather than skip without it.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1; then \
			SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
			$$SUDO apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
				chromium fonts-dejavu-core >/dev/null; \
		else \
			echo "warning: no chromium and no apt-get: install Chromium for the report browser test"; \
		fi; }

# PRISM_REQUIRE_TRACES: the tests that read the real traces fail, not skip, where neither
# $$PRISM_TRACES_DIR nor ../shared/data/traces holds them.
# The suite runs on TEST_JOBS processes (pytest-xdist, work stealing for the long tests), each
# on one BLAS/OpenMP thread so that the processes do not oversubscribe the cores.
# TEST_JOBS=0 runs it in this process. `make test` leaves out the tests marked `slow` (each about
# 7 s or more: servers killed mid-ingest, Ray clusters, Chromium, PRISM fits on whole
# traces) so that it stays under 10 minutes on 2 cores; `make test SLOW=1` runs every test
# in one session, and CI (.ci/run) runs that.
TEST_JOBS ?= 2
SLOW ?= 0
NOT_SLOW := $(if $(filter 1,$(SLOW)),,-m "not slow")
THREADS := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
test: lint typecheck chromium
	$(THREADS) PRISM_REQUIRE_CHROMIUM=1 PRISM_REQUIRE_TRACES=1 \
		$(BIN)/pytest -n $(TEST_JOBS) --dist worksteal $(NOT_SLOW)
	$(if $(NOT_SLOW),@echo "(the tests marked slow were left out: make test SLOW=1 runs them too, as CI does)")

bench: $(STAMP)
	$(BIN)/python -m evaluation.benchmarks.ingest

# The accuracy benchmark (evaluation/results/accuracy.md): every model and PRISM ablation on
# every panel, one process per core (JOBS). Long: hours on 2 cores.
JOBS ?= 2
bench-accuracy: $(STAMP)
	$(BIN)/python -m evaluation.benchmarks.accuracy --jobs $(JOBS)

# Shapes the accuracy panels lack (idle VCs, bursts, weekday plateaus, sawtooth, inference
# apps autoscaled or resized by hand, counts, hourly shifts, growth, a fleet scaled by hand
# in steps, a busy VC drained now and then), generated: PRISM, its newest switches and gbm
# against the last value (evaluation/results/shapes.md). About 50 minutes on one core
# (five PRISM variants, each about 4 minutes per seed).
bench-shapes: $(STAMP)
	$(BIN)/python -m evaluation.benchmarks.shapes --models gbm,prism,prism-series_veto,prism-hold_tail,prism-hold_gate,prism+quiet_held

# Queued GPUs, submissions and capacity as features of the global learners (gbm, and PRISM's
# gbm candidate), each against itself without them, on both weeks of the accuracy benchmark
# (evaluation/results/covariates.md and earlier_week/): measured, not in PRISM. About an hour
# per week on one core.
bench-covariates: $(STAMP)
	$(BIN)/python -m evaluation.benchmarks.covariates
	$(BIN)/python -m evaluation.benchmarks.covariates --before 7d \
		--output evaluation/results/earlier_week

# The same with statsforecast's models as references (the `bench` extra), which needs
# pandas < 3: it gets its own venv so that .venv keeps what a fresh install gets.
bench-accuracy-references: pyproject.toml
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install --quiet --upgrade pip
	.venv-bench/bin/python -m pip install --quiet -e '.[dev,bench]'
	.venv-bench/bin/python -m evaluation.benchmarks.accuracy --jobs $(JOBS) --references

clean:
	rm -rf $(VENV) .venv-bench build .pytest_cache .mypy_cache .ruff_cache
