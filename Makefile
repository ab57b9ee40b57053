# smrweb — `make demo` to try it, `make serve` to run it, `make test` to check it (`make lint`, then pytest).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Runtime pins (also what the Docker image installs) and runtime + test pins, both with hashes.
LOCK      := requirements.lock
TEST_LOCK := requirements-test.lock
STAMP      = $(VENV)/.installed-$(notdir $(1))-$(shell cat $(1) pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install install-test demo serve lint test bench fuzz browser-deps sandbox-deps lock clean distclean check-python

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "smrweb needs Python 3.11 or newer")'

$(VENV)/bin/python: | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(call STAMP,$(LOCK)): $(LOCK) pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .  # smrweb itself: the `smrweb` console script
	@rm -f $(VENV)/.installed-$(LOCK)-* && touch $@

$(call STAMP,$(TEST_LOCK)): $(TEST_LOCK) pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet --require-hashes -r $(TEST_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-$(TEST_LOCK)-* && touch $@

install: $(call STAMP,$(LOCK))
install-test: $(call STAMP,$(TEST_LOCK))

# The demo keeps its data (and its demo login) apart from what `make serve` runs on.
demo: install sandbox-deps
	DEBUG=$${DEBUG:-false} SMRWEB_DATA_DIR=$${SMRWEB_DATA_DIR:-var/demo} $(BIN)/python manage.py runstack --demo

serve: install sandbox-deps
	$(BIN)/python manage.py runstack

# Browser tests need Debian's Chromium: installed here when we may (root or sudo), else they skip.
browser-deps:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not installed and no root: browser tests will be skipped"; fi; } || true

# Validators run in bubblewrap (Debian's bubblewrap): installed here when we may; without it every
# verification answers "cannot verify" and says why (it never runs a validator unconfined).
sandbox-deps:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "bubblewrap not installed and no root: validators will answer 'cannot verify'"; fi; } || true

# ruff: the lint rules (pyproject.toml [tool.ruff]: errors, import order, 110 columns) and its formatting.
lint: install-test
	$(BIN)/ruff check smrweb tests bench
	$(BIN)/ruff format --check smrweb tests bench

# Lint first: a finding stops the run before the (slow) suite starts.
test: install-test lint browser-deps sandbox-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# A longer schemathesis run against the OpenAPI schema than the bounded one inside `make test`.
fuzz: install-test
	SMRWEB_FUZZ_EXAMPLES=$${SMRWEB_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest tests/api/test_schema_fuzz.py $(PYTEST_ARGS)

# Measured, not assumed: results go to docs/benchmarks.md. Not part of `make test`.
bench: install-test
	$(BIN)/python bench/ingest.py --events 10000 --batch 1000 --priced-share 0.5
	$(BIN)/python bench/ingest_vs_mlflow.py --append
	$(BIN)/python bench/ingest_vs_mlflow.py --client --repeat 2 --append
	$(BIN)/python bench/retention.py --runs 200
	$(BIN)/python bench/smr_poll.py --turns 100 1000 10000 --runs 100 300 1000 --cycles 3
	$(BIN)/python bench/pages.py --append
	$(BIN)/python bench/scale.py --append
	$(BIN)/python bench/browser.py --append
	$(BIN)/python bench/viewer.py --append
	$(BIN)/python bench/polls.py --append
	$(BIN)/python bench/arms.py --append
	$(BIN)/python bench/columns.py --append
	$(BIN)/python bench/review.py --append
	$(BIN)/python bench/load.py --seconds 60 --append
	$(BIN)/python bench/load.py --seconds 60 --postgres --append
	$(BIN)/python bench/load.py --live-page --seconds 60 --seed-turns 100000 --live-interval 5 --append
	$(BIN)/python bench/load.py --live-page --seconds 60 --seed-turns 100000 --live-interval 5 --postgres --append

# Re-pin every dependency (with hashes) after editing pyproject.toml.
lock: | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/python -m uv pip compile pyproject.toml --generate-hashes --python-version 3.11 -o $(LOCK)
	$(BIN)/python -m uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o $(TEST_LOCK)

# Removes the virtualenv only; `distclean` also removes var/ (the database, artifacts and secret key).
clean:
	rm -rf $(VENV) .pytest_cache
distclean: clean
	rm -rf var
