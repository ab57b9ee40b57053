"""Issue 34, polling that scales out: a run sync is one transaction; an unchanged live run costs its two
small spend requests and no write; two real Celery workers share one project, each run under a lease of
its own, and a worker SIGKILLed mid-cycle loses nothing and syncs nothing twice at once (its runs are
taken by the other worker once their leases lapse)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from datetime import datetime

import pytest
from django.db import connection

from smrweb.sources.smr import SmrConnector
from smrweb.tracking.models import AgentTurn, Run
from tests.conftest import _start, _wait_for_line, wait_for
from tests.sources.smr_project import bind_to, simulator_factory, synced

API_KEY, PID = "scale-key", "scale-proj"
RUN_LIST = "GET /smr/projects/{project_id}/runs"
RESULTS = "GET /smr/projects/{project_id}/experiment-results"
WRITES = ("INSERT", "UPDATE", "DELETE", "COPY", "REPLACE")


@pytest.fixture
def sim(start_sim):
    start = simulator_factory(
        start_sim, api_key=API_KEY, project_ids=[PID], runs=6, auto_tick=False, seed=7, warmup=30
    )

    def _start(**options):
        backend = start(**options)
        for run in backend.world.runs.values():
            run.run_ticks = 10**9  # all stay live
        return backend

    return _start


def bind(sim, alice):
    return bind_to(sim, alice, slug="scale", smr_project=PID, api_key=API_KEY)


class WriteTransactions:
    """Counts the transactions that write: each outermost atomic block with a write in it (counted once,
    however many statements and savepoints it holds), and each write run in autocommit. Works inside
    the test's own transaction too (its blocks are the ones just inside the test's)."""

    def __init__(self):
        self.blocks: list = []  # the Atomic objects seen (kept: their ids stay unique)
        self.autocommit = 0
        self.savepoints = 0
        self.statements = 0  # every statement, reads too
        self.first: list[str] = []  # each transaction's first write (what failed assertions show)

    @property
    def count(self) -> int:
        return len(self.blocks) + self.autocommit

    def __call__(self, execute, sql, params, many, context):
        statement = sql.lstrip().upper()
        self.statements += 1
        if statement.startswith("SAVEPOINT"):
            self.savepoints += 1
        elif statement.startswith(WRITES):
            depth = self.base
            if len(connection.atomic_blocks) > depth:
                block = connection.atomic_blocks[depth]
                if not any(b is block for b in self.blocks):
                    self.blocks.append(block)
                    self.first.append(sql[:90])
            else:
                self.autocommit += 1
                self.first.append("auto: " + sql[:90])
        return execute(sql, params, many, context)

    def __enter__(self):
        self.base = len(connection.atomic_blocks)
        self._wrapper = connection.execute_wrapper(self)
        self._wrapper.__enter__()
        return self

    def __exit__(self, *exc):
        self._wrapper.__exit__(*exc)


def test_a_run_sync_writes_in_one_transaction(sim, alice):
    backend = sim()
    project = bind(backend, alice)
    synced(project)
    backend.world.tick(3)  # every run moves: turns, meters, results, checkpoints
    turns = AgentTurn.objects.filter(run__project=project).count()
    with WriteTransactions() as writes:
        report = synced(project)
    assert report.synced >= 4 and AgentTurn.objects.filter(run__project=project).count() > turns
    # One per run; the project's own: its lease taken and given back, its health (was ~8 per run).
    project_writes = 3
    assert writes.count <= report.synced + project_writes, "\n".join(writes.first)


def test_a_changing_run_sync_asks_the_database_little(sim, alice):
    """A live run with news costs about a dozen statements: its row, its new turns' keys, their insert,
    the spend sums, two updates. What it saw last cycle at its marks (its newest result, checkpoint and
    message) is not re-sent to be looked up again, its experiments are not re-read when all are named,
    a few metric points are not staged, and the write takes no savepoint (was ~30 per run)."""
    backend = sim()
    project = bind(backend, alice)
    synced(project)
    for _ in range(3):
        backend.world.tick(1)
        synced(project)
    backend.world.tick(1)
    with WriteTransactions() as writes:
        report = synced(project)
    changed = report.synced - report.unchanged
    assert changed >= 4
    per_run = writes.statements / changed
    print(f"{per_run:.1f} statements, {writes.savepoints} savepoints per changed run")
    # 15.8 before issue 36; the overview's figures add one UPDATE by the ingest and one by the sync's
    # fields (each O(1): the run's share moved), the days' spend one, a new score's best and window two.
    assert per_run <= 20, per_run
    # The write is its own (a savepoint here, inside the test's transaction); the ingest takes none.
    assert writes.savepoints <= changed + changed // 2, writes.savepoints


def test_a_quiet_runs_newest_items_are_not_sent_again_but_a_late_tie_is():
    """The cursor of a kind keeps the ids taken at its mark: the next cycle skips them, takes an item
    that arrived later with the same time, and a mark that moves forgets the old ids."""
    since = SmrConnector._since
    items = [{"t": "1", "id": "a"}, {"t": "2", "id": "b"}, {"t": "2", "id": "c"}]
    cursor: dict = {}

    def read(items):
        new_cursor: dict = {}
        fresh = since(items, lambda i: i["t"], cursor, "k", new_cursor, lambda i: i["id"])
        cursor.update(new_cursor)
        return [i["id"] for i in fresh]

    assert read(items) == ["a", "b", "c"]
    assert cursor == {"k": "2", "k_at_mark": ["b", "c"]}
    assert read(items) == []  # nothing new: nothing re-sent
    assert read([*items, {"t": "2", "id": "d"}]) == ["d"]  # a late tie still comes
    assert cursor["k_at_mark"] == ["b", "c", "d"]
    assert read([*items, {"t": "3", "id": "e"}]) == ["e"]
    assert cursor == {"k": "3", "k_at_mark": ["e"]}
    # A cursor written before the ids were kept: the items at its mark come again (no-ops downstream).
    assert since(items, lambda i: i["t"], {"k": "2"}, "k", {}, lambda i: i["id"]) == items[1:]


def test_an_unchanged_live_run_costs_two_small_requests_and_no_write(sim, alice, settings):
    backend = sim()
    project = bind(backend, alice)
    synced(project)
    backend.world.tick(2)
    synced(project)
    live = Run.objects.filter(project=project).exclude(state__in=["succeeded", "failed", "cancelled"])
    n = live.count()
    assert n >= 4
    backend.stats.reset()
    with WriteTransactions() as writes:
        report = synced(project)  # nothing moved
    requests = backend.stats.snapshot()["requests"]
    # The project's own (its run list, the results window its experiments declare metrics in) aside:
    project_level = requests.get(RUN_LIST, 0) + requests.get(RESULTS, 0)
    assert project_level <= 2 and (sum(requests.values()) - project_level) / n <= 2, requests
    assert report.unchanged == n
    # Their poll time (one statement for all) and the project's lease and health only.
    assert writes.count <= 4, writes.count

    # Anything new, and the run is read whole again: the check never hides news.
    backend.world.tick(2)
    report = synced(project)
    world = {r["run_id"]: r for r in backend.world.state()["projects"][PID]["runs"]}
    assert report.unchanged < n
    for run in Run.objects.filter(project=project):
        usage = world[run.external_id]["usage"]
        assert run.turn_count == usage["orchestrator_turns"] + usage["worker_turns"], run.external_id
    # What moves no money (a message, a checkpoint) is read within SMRWEB_SMR_RUN_REFRESH_SECONDS.
    settings.SMRWEB_SMR_RUN_REFRESH_SECONDS = 0
    assert synced(project).unchanged == 0


# --- two real workers share one project; one is SIGKILLed mid-cycle -----------------------------------

LINE = re.compile(r"^\[(\S+ [\d:,]+): DEBUG/\w+\] run (\S+): sync (started|ended)")  # celery's format


def intervals(log, *, killed_at: datetime | None = None) -> dict[str, list[tuple[datetime, datetime]]]:
    """Each run's sync intervals in one worker's log; one still open ends at the worker's death."""
    found: dict[str, list] = {}
    open_: dict[str, datetime] = {}
    for line in log.read_text().splitlines():
        m = LINE.match(line)
        if not m:
            continue
        at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f")
        if m[3] == "started":
            open_[m[2]] = at
        else:
            found.setdefault(m[2], []).append((open_.pop(m[2]), at))
    for rid, start in open_.items():
        assert killed_at is not None, f"run {rid} never ended in a worker that was not killed"
        found.setdefault(rid, []).append((start, killed_at))
    return found


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_two_workers_share_a_project_and_a_killed_workers_runs_are_taken_over(
    alice, start_sim, celery_queue, django_db_setup, tmp_path
):
    backend = start_sim(api_key=API_KEY, project_ids=[PID], runs=6, auto_tick=False, seed=7, warmup=20)
    for run in backend.world.runs.values():
        run.run_ticks = 10**9  # all stay live
    project = bind(backend, alice)
    backend.world.tick(2)
    backend.set_faults("slow=1.0,slow_seconds=0.3")  # a run sync takes seconds: the kill lands mid-sync
    queue = f"{celery_queue}-share"  # this test's workers only
    env = {
        "SMRWEB_CELERY_QUEUE": queue,
        "SMRWEB_SMR_RUNS_PER_TASK": "1",
        "SMRWEB_SMR_RUN_LEASE_SECONDS": "3",
    }

    def worker(name):
        log = tmp_path / f"{name}.log"
        argv = [sys.executable, "-m", "celery", "-A", "smrweb", "worker", "--loglevel", "DEBUG", "-c", "1"]
        argv += ["--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        proc = _start([*argv, "-n", f"{name}-{os.getpid()}@localhost"], log, env)
        return proc, log

    (doomed, doomed_log), (survivor, survivor_log) = worker("doomed"), worker("survivor")
    beat_log = tmp_path / "beat.log"
    beat = _start(
        [sys.executable, "-m", "celery", "-A", "smrweb", "beat", "--schedule", str(tmp_path / "sched")],
        beat_log,
        env,
    )
    try:
        _wait_for_line(doomed, doomed_log, "ready.")
        _wait_for_line(survivor, survivor_log, "ready.")
        # Both workers sync runs of the one project, then one dies mid-sync.
        wait_for(lambda: intervals_started(doomed_log) and intervals_started(survivor_log), timeout=60)
        wait_for(lambda: open_runs(doomed_log), timeout=30, interval=0.05)
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = datetime.now()
        doomed.wait()
        held = open_runs(doomed_log)
        backend.set_faults("")
        backend.world.tick(2)  # news for every run: each must be read again, by the survivor
        world = {r["run_id"]: r for r in backend.world.state()["projects"][PID]["runs"]}

        def converged() -> bool:
            runs = {r.external_id: r for r in Run.objects.filter(project=project)}
            return set(runs) == set(world) and all(
                runs[rid].turn_count
                == w["usage"]["orchestrator_turns"] + w["usage"]["worker_turns"]
                == AgentTurn.objects.filter(run=runs[rid]).count()
                for rid, w in world.items()
            )

        wait_for(converged, timeout=60, interval=0.5)
        taken_over = time.monotonic()
    finally:
        for proc in (beat, survivor):
            proc.terminate()
            proc.wait(timeout=15)
        if doomed.poll() is None:
            doomed.kill()
    assert taken_over  # nothing lost: every run has every turn, each once
    first = intervals(doomed_log, killed_at=killed_at)
    second = intervals(survivor_log)
    assert first and second, "both workers synced runs of the one project"
    # Nothing synced twice at once: no run's sync on one worker overlaps its sync on the other.
    for rid in set(first) & set(second):
        for a_start, a_end in first[rid]:
            for b_start, b_end in second[rid]:
                assert a_end <= b_start or b_end <= a_start, (rid, (a_start, a_end), (b_start, b_end))
    # The runs the dead worker held were synced again by the survivor after its death.
    for rid in held:
        assert any(start > killed_at for start, _ in second.get(rid, [])), rid
    assert max(backend.stats.snapshot()["content_served"].values()) == 1  # every digest pulled once


def intervals_started(log) -> bool:
    return any(LINE.match(line) for line in log.read_text().splitlines())


def open_runs(log) -> set[str]:
    """Runs whose sync has started and not ended in this log."""
    running: set[str] = set()
    for line in log.read_text().splitlines():
        if m := LINE.match(line):
            (running.add if m[3] == "started" else running.discard)(m[2])
    return running
