# The two commands of the README: `make run` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
REDIS_URL_TEST ?= redis://127.0.0.1:6379/0
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-sqlite test-postgres test-halves test-half-sqlite test-half-postgres \
	test-timed lint chromium bench demo-record

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

## Set up, fill an embedded SQLite database with demo data, serve the dashboard on :8000 with
## uvicorn (as the Dockerfile's CMD serves it in production), and run scripted demo agents
## beside it (press Start on a template to watch a cluster run).
run: export DJANGO_DEBUG = 1
run: $(STAMP)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo
	(sleep 3; exec $(PY) manage.py run_agents --url http://$(HOST):$(PORT) --provider scripted \
	    --label pool=demo --script dashboard/demo/agents.json --concurrency 4 --wait 10 --log-level WARNING) & \
	trap 'kill $$! 2>/dev/null' EXIT INT TERM; \
	$(PY) -m uvicorn --host $(HOST) --port $(PORT) --backlog 1024 --loop uvloop --http httptools \
	    --ws zeroshot_web.websocket_frames:SharedFrameProtocol --ws-per-message-deflate false \
	    --lifespan on --no-access-log \
	    --no-proxy-headers --timeout-keep-alive 75 --timeout-graceful-shutdown 5 \
	    zeroshot_web.asgi:application

## Record the demo again (dashboard/demo/recorded.json) by running its scenarios from their
## templates on a throwaway SQLite database; `make run` loads the recording.
demo-record: export DJANGO_DEBUG = 1
demo-record: export DATABASE_URL = sqlite:///$(CURDIR)/.demo-record.sqlite3
demo-record: $(STAMP)
	rm -f .demo-record.sqlite3
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo --record
	rm -f .demo-record.sqlite3

## Set up and run the whole suite: lint; then the SQLite half (with the browser) and the
## PostgreSQL + Redis half side by side, one pytest each; then the tests that time themselves or
## load the machine (marker `timed`), alone, on each database in turn (docs/decisions/0205).
test: $(STAMP) chromium lint test-halves test-timed

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy .

PYTEST := $(PY) -m pytest -q -p no:cacheprovider --durations=15
SQLITE_ENV := env -u DATABASE_URL -u REDIS_URL
POSTGRES_ENV := env DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_URL_TEST)
ARTIFACTS := test-artifacts

## The whole suite on one database.
test-sqlite: $(STAMP)
	$(SQLITE_ENV) $(PYTEST)

test-postgres: $(STAMP)
	$(POSTGRES_ENV) $(PYTEST) -m "not browser"

## Both halves at once, failing if either fails (-k: the other one still runs to its end).
test-halves: $(STAMP)
	@$(MAKE) --no-print-directory -j2 -k test-half-sqlite test-half-postgres

# A half writes its output to test-artifacts/<half>.log and prints it whole once it ends (under a
# lock, so two halves ending together do not interleave); its status is pytest's.
define half
	@mkdir -p $(ARTIFACTS)
	@echo "$(1) half: started, output in $(ARTIFACTS)/$(1).log"
	@status=0; $(2) >$(ARTIFACTS)/$(1).log 2>&1 || status=$$?; \
	flock $(ARTIFACTS)/.print sh -c 'printf "\n===== %s half (exit %s) =====\n" "$$0" "$$1"; \
	    cat "$(ARTIFACTS)/$$0.log"' $(1) $$status; \
	exit $$status
endef

test-half-sqlite: $(STAMP)
	$(call half,sqlite,$(SQLITE_ENV) $(PYTEST) -m "not timed")

test-half-postgres: $(STAMP)
	$(call half,postgres,$(POSTGRES_ENV) $(PYTEST) -m "not timed and not browser")

## The timed tests, with nothing else running, SQLite then PostgreSQL + Redis (both even if one
## fails).
test-timed: $(STAMP)
	@status=0; \
	$(SQLITE_ENV) $(PYTEST) -m timed || status=1; \
	$(POSTGRES_ENV) $(PYTEST) -m "timed and not browser" || status=1; \
	exit $$status

## Debian's Chromium for the browser tests (never a browser download).
chromium:
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)

## Benchmarks (never part of the suite); figures in bench/results/. perf_bench.py takes its
## PostgreSQL, Redis and zeroshot checkout from PERF_ARGS (see bench/README.md).
PERF_ARGS ?=
bench: $(STAMP)
	$(PY) bench/perf_bench.py $(PERF_ARGS)
	$(PY) bench/ledger_bench.py
	$(PY) bench/context_bench.py
	$(PY) bench/runner_bench.py
	$(PY) bench/search_bench.py
