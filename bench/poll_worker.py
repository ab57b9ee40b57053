"""A Celery worker for bench/smr_poll.py --workers: the code under test (BENCH_CODE, a checkout of
smrweb) with its database time, statements and transactions counted and its CPU time read after each
task, written to BENCH_STATS (JSON) for the bench to read. Works with any version of smrweb: it only
wraps Django's connection.

    BENCH_CODE=/path/to/smrweb-checkout BENCH_STATS=/tmp/w1.json python bench/poll_worker.py -n w1@host
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

sys.path.insert(0, os.environ["BENCH_CODE"])
os.chdir(os.environ["BENCH_CODE"])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")

import django  # noqa: E402

django.setup()

from celery.signals import task_postrun  # noqa: E402
from django.db.backends.base.base import BaseDatabaseWrapper  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402

STATS = {"db_seconds": 0.0, "statements": 0, "commits": 0, "autocommit_writes": 0, "tasks": 0}
WRITES = ("INSERT", "UPDATE", "DELETE", "COPY")


def timed(execute, sql, params, many, context):
    start = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        STATS["db_seconds"] += time.perf_counter() - start
        STATS["statements"] += 1
        if os.environ.get("BENCH_SQL_LOG"):
            with open(os.environ["BENCH_SQL_LOG"], "a") as f:
                f.write(sql[:70].replace("\n", " ") + "\n")
        if not context["connection"].in_atomic_block and sql.lstrip().upper().startswith(WRITES):
            STATS["autocommit_writes"] += 1  # a transaction of its own


def wrap(sender, connection, **kwargs):
    if timed not in connection.execute_wrappers:  # fired again on each reconnect of the same wrapper
        connection.execute_wrappers.append(timed)


connection_created.connect(wrap)
_commit = BaseDatabaseWrapper.commit


def commit(self):
    start = time.perf_counter()
    try:
        return _commit(self)
    finally:
        STATS["db_seconds"] += time.perf_counter() - start
        STATS["commits"] += 1


BaseDatabaseWrapper.commit = commit


@task_postrun.connect
def dump(**kwargs):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    STATS["tasks"] += 1
    STATS["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    path = os.environ["BENCH_STATS"]
    with open(path + ".tmp", "w") as f:
        json.dump(STATS, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    from smrweb.celery import app

    app.worker_main(
        ["worker", "--pool", "solo", "--concurrency", "1", "--without-gossip", "--without-mingle"]
        + ["--without-heartbeat", "--loglevel", "WARNING", *sys.argv[1:]]
    )
