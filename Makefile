.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH_VENV ?= bench/.venv
BENCH_PY := $(BENCH_VENV)/bin/python
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The peers (PgQueuer, Procrastinate, DBOS) live in a bench-only venv, never in .venv.
$(BENCH_VENV)/.installed: bench/requirements-peers.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --quiet -r bench/requirements-peers.txt
	$(BENCH_PY) -m pip check
	touch $@

install: $(VENV)/.installed             ## create .venv with laneway (editable) and the dev tools
run: install                            ## serve app/ on 127.0.0.1:8000, or HOST= PORT= (embedded PostgreSQL in .laneway/)
	$(PY) -m app --host $(HOST) --port $(PORT)
worker: install                         ## run an engine-only worker
	LANEWAY_WORKFLOWS=$${LANEWAY_WORKFLOWS:-app.examples} $(PY) -m laneway worker
test: install                           ## the whole suite on a throwaway PostgreSQL
	$(PY) -m pytest -n 2 --dist loadfile
chaos: install                          ## full reliability tier: production leases, ~45 min on the 2-core box (docs/reliability.md)
	$(PY) -m tests.chaos.full
soak: install                           ## K-01 soak: 20/s, 20 websockets, kills, LISTEN cuts; one table (SOAK_MINUTES, default 60)
	$(PY) -m tests.chaos.soak --minutes $${SOAK_MINUTES:-60}
lint: install                           ## ruff and mypy
	$(PY) -m ruff check laneway app tests bench tools
	$(PY) -m ruff format --check laneway app tests bench tools
	$(PY) -m mypy
check: lint                             ## alias of lint
fmt: install                            ## apply lint fixes and formatting
	$(PY) -m ruff check --fix laneway app tests bench tools
	$(PY) -m ruff format laneway app tests bench tools
schema: install                         ## rewrite schema.graphql from the code
	$(PY) -m laneway export-schema > schema.graphql
bench-peers: $(BENCH_VENV)/.installed   ## bench/.venv with the pinned peers of `make bench`
bench: install bench-peers              ## side by side with PgQueuer, Procrastinate, DBOS, and the issue #22 targets; ~15 min (BENCH_ARGS=--markdown)
	$(PY) bench/compare.py $(BENCH_ARGS)
bench-engine: install                   ## Laneway-only engine throughput and latency figures
	$(PY) bench/engine_bench.py
bench-service: install                  ## service-level figures: websocket latency, fan-out, idle queries, claims
	$(PY) bench/service_bench.py
bench-claim-keys: install               ## cost of one claim: 100,000 pending, no keys vs 1,000 keys (BENCH_ARGS=--markdown)
	$(PY) bench/claim_keys.py $(BENCH_ARGS)
bench-wakeups: install                  ## wake-up lag of 10,000 sleeps due within a second; what 100,000 waiting cost (BENCH_ARGS=--markdown)
	$(PY) bench/wakeups.py $(BENCH_ARGS)
bench-pages: install                    ## page 1 vs page 1,000 of 1,000,000 instances: keyset against offset (BENCH_ARGS=--markdown)
	$(PY) bench/pages.py $(BENCH_ARGS)
help:
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'
.PHONY: install run worker test chaos soak lint check fmt schema bench bench-peers bench-engine bench-service bench-claim-keys bench-wakeups bench-pages help
