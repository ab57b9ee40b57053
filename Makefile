# smrweb — `make demo` to try it, `make serve` to run it, `make test` to check it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install migrate demo serve test bench browser-deps lock clean check-python

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "smrweb needs Python 3.11 or newer")'

$(STAMP): requirements.lock pyproject.toml | check-python
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

install: $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --noinput

demo: migrate
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py runstack --demo

serve: migrate
	$(BIN)/python manage.py runstack

# Browser tests need Debian's Chromium: installed here when we may (root or sudo), else they skip.
browser-deps:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not installed and no root: browser tests will be skipped"; fi; } || true

test: install browser-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Measured, not assumed: results go to docs/benchmarks.md. Not part of `make test`.
bench: migrate
	$(BIN)/python bench/ingest.py --events 10000 --batch 1000

# Re-pin every dependency (with hashes) after editing pyproject.toml.
lock:
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/python -m uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) var
