"""DATABASES as settings.py builds it from the deployment's variables (read by starting Django in a
subprocess with them set, so what is checked is what a deployment gets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _database(tmp_path, **variables) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(SMRWEB_DATA_DIR=str(tmp_path), **variables)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'smrweb.settings'; "
            "from django.conf import settings; print(json.dumps(settings.DATABASES['default'], default=str))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_server_side_cursors_can_be_turned_off_for_pgbouncer(tmp_path):
    url = "postgres://smrweb:secret@db.example:6432/smrweb"
    assert _database(tmp_path, DATABASE_URL=url)["DISABLE_SERVER_SIDE_CURSORS"] is False
    behind_pgbouncer = _database(
        tmp_path, DATABASE_URL=url, SMRWEB_DB_DISABLE_SERVER_SIDE_CURSORS="true", CONN_MAX_AGE="0"
    )
    assert behind_pgbouncer["DISABLE_SERVER_SIDE_CURSORS"] is True and behind_pgbouncer["CONN_MAX_AGE"] == 0
    assert behind_pgbouncer["PORT"] == 6432
