"""The dispatch settings (SMRWEB_DISPATCH_*) as settings.py builds them from the deployment's variables,
the SMRWEB_ROLLBACK_* names they had read when the new ones are not set (read by starting Django in a
subprocess, so what is checked is what a deployment gets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

NAMES = ("MAX_ATTEMPTS", "RETRY_BASE_SECONDS", "RETRY_MAX_SECONDS", "WEBHOOK_TIMEOUT")


def _dispatch_settings(tmp_path, **variables) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMRWEB_DISPATCH_", "SMRWEB_ROLLBACK_"))}
    env.update(SMRWEB_DATA_DIR=str(tmp_path), **variables)
    names = [f"SMRWEB_DISPATCH_{n}" for n in NAMES]
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'smrweb.settings'; "
            "from django.conf import settings; "
            f"print(json.dumps({{n: getattr(settings, n) for n in {names!r}}}))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        k.removeprefix("SMRWEB_DISPATCH_"): v
        for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()
    }


def test_the_defaults(tmp_path):
    assert _dispatch_settings(tmp_path) == {
        "MAX_ATTEMPTS": 6,
        "RETRY_BASE_SECONDS": 5.0,
        "RETRY_MAX_SECONDS": 300.0,
        "WEBHOOK_TIMEOUT": 10.0,
    }


def test_the_old_rollback_names_are_read_when_the_new_ones_are_not_set(tmp_path):
    old = {
        "MAX_ATTEMPTS": "9",
        "RETRY_BASE_SECONDS": "1.5",
        "RETRY_MAX_SECONDS": "60",
        "WEBHOOK_TIMEOUT": "3",
    }
    got = _dispatch_settings(tmp_path, **{f"SMRWEB_ROLLBACK_{k}": v for k, v in old.items()})
    assert got == {
        "MAX_ATTEMPTS": 9,
        "RETRY_BASE_SECONDS": 1.5,
        "RETRY_MAX_SECONDS": 60.0,
        "WEBHOOK_TIMEOUT": 3.0,
    }


def test_the_new_names_win_over_the_old(tmp_path):
    got = _dispatch_settings(
        tmp_path,
        SMRWEB_ROLLBACK_MAX_ATTEMPTS="9",
        SMRWEB_DISPATCH_MAX_ATTEMPTS="2",
        SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT="3",
        SMRWEB_DISPATCH_WEBHOOK_TIMEOUT="4",
    )
    assert (got["MAX_ATTEMPTS"], got["WEBHOOK_TIMEOUT"]) == (2, 4.0)
