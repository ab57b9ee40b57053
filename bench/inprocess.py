"""What the in-process benches share (bench/arms.py, bench/columns.py): a fresh data dir (SQLite, or the
PostgreSQL database given with --postgres) set up before Django starts, the embedded Redis the pages use as
their cache (as `make serve` runs it), the migrated schema, and the dated section appended to
docs/benchmarks.md. Importing this module starts Django: import it before any model."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = Path(tempfile.mkdtemp(prefix="smrweb-bench-"))
os.environ["SMRWEB_DATA_DIR"] = str(DATA)
os.environ.pop("DATABASE_URL", None)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")
if "--postgres" in sys.argv:
    os.environ["DATABASE_URL"] = sys.argv[sys.argv.index("--postgres") + 1]

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402


@contextlib.contextmanager
def world():
    """The embedded Redis and a migrated database for the bench's lifetime; everything removed after."""
    logging.getLogger("smrweb.core.queue").setLevel(logging.ERROR)  # no worker here: alerts not queued
    redis = None
    if settings.EMBEDDED_REDIS:
        from smrweb.stack.management.commands.runstack import start_embedded_redis

        redis = start_embedded_redis()
    try:
        call_command("migrate", verbosity=0)
        yield
    finally:
        connection.close()
        if redis is not None:
            with contextlib.suppress(OSError, TypeError):
                os.kill(redis.pid, signal.SIGTERM)
        shutil.rmtree(DATA, ignore_errors=True)


def arguments(doc: str) -> argparse.ArgumentParser:
    """An in-process bench's command line: its docstring as help, and the two options every one of them
    reads (`--postgres`, read from sys.argv above before Django starts; `--append`, for `report`)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", help="a database URL to run on instead of SQLite")
    parser.add_argument("--append", action="store_true", help="also append the section to docs/benchmarks.md")
    return parser


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip()


def report(text: str, *, append: bool) -> None:
    """Print the section; with `append`, also add it to docs/benchmarks.md."""
    print(text)
    if append:
        docs = ROOT / "docs" / "benchmarks.md"
        docs.write_text(docs.read_text().rstrip("\n") + "\n\n" + text + "\n")
        print(f"appended to {docs}", file=sys.stderr)
