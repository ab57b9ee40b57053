"""Issue 36, item 1: the overview's figures are kept by the write path (`ProjectFigures`, `RunDaySpend`,
services/figures.py) and equal the from-scratch computation (`queries.summary_reference`) after any
interleaving of the writes that move them; a page reads them in a fixed number of queries that never scan
the submissions or the turns."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smrweb.tracking import events as ev
from smrweb.tracking import queries, services
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import AgentTurn, Project, Run, Submission
from smrweb.tracking.queries.summary_reference import computed_condition_counts, computed_summary_figures
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.figures import rebuild_project_figures
from smrweb.tracking.services.submissions import VerificationResult
from tests.factories import admin_project

RUNS = ("r0", "r1", "r2")
STATES = ("running", "failed", "done", "abandoned", "paused")


def ingest(project, run_id: str, *events: dict):
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events))))


def maintained(project: Project, unverified: bool) -> dict:
    project = Project.objects.select_related("scenario").get(pk=project.pk)
    [summary] = queries.project_summaries([project], unverified=unverified)
    return {k: v for k, v in vars(summary).items() if k != "project"}


def reference(project: Project, unverified: bool) -> dict:
    project = Project.objects.select_related("scenario").get(pk=project.pk)
    return computed_summary_figures([project], unverified)[project.pk]


def cents(figures: dict) -> dict:
    """USD to the model's 6 places: SQLite sums the turns' decimals as floats (30.0000000000019), the
    kept spend adds them as decimals."""
    return {k: v.quantize(Decimal("0.000001")) if isinstance(v, Decimal) else v for k, v in figures.items()}


def assert_kept(project: Project, step: str) -> None:
    fresh = Project.objects.select_related("scenario").get(pk=project.pk)
    counts, computed_counts = queries.run_condition_counts(fresh), computed_condition_counts(fresh)
    assert counts == {k: v or 0 for k, v in computed_counts.items()}, f"after {step}: the runs table's counts"
    for unverified in (False, True):
        kept, computed = cents(maintained(project, unverified)), cents(reference(project, unverified))
        assert kept == computed, f"after {step} (unverified={unverified}): " + ", ".join(
            f"{k}: kept {kept[k]!r}, computed {computed[k]!r}" for k in kept if kept[k] != computed[k]
        )


class World:
    """One project written through the services only, step by step."""

    def __init__(self, project: Project, by) -> None:
        self.project, self.by, self.n = project, by, 0
        self.done: Counter = Counter()  # the steps that wrote
        self.now = timezone.now()

    def do(self, name: str, *args) -> None:
        try:
            getattr(self, name)(*args)
        except TrackingError:
            return  # refused (a run that is archived, an illegal move): nothing written
        self.done[name] += 1

    def _id(self) -> str:
        self.n += 1
        return f"e{self.n}"

    def _run(self, i: int) -> Run | None:
        return Run.objects.filter(project=self.project, external_id=RUNS[i % len(RUNS)]).first()

    def _finished(self, i: int) -> Run | None:
        """The run, ended first (a live run is refused deletion and archiving)."""
        if self._run(i) is None:
            return None
        self.state(i, STATES.index("done"))
        return self._run(i)

    def _submission(self, i: int) -> Submission | None:
        subs = list(Submission.objects.filter(project=self.project).order_by("pk"))
        return subs[i % len(subs)] if subs else None

    def turns(self, run: int, costs: list[int], day: int) -> None:
        ts = self.now - timedelta(days=day, minutes=1)  # today (0) or earlier days
        events = [
            {
                "type": "agent.turn",
                "id": self._id(),
                "turn": self.n,
                "cost_usd": c / 100,
                "ts": ts.isoformat(),
            }
            for c in costs
        ]
        ingest(self.project, RUNS[run], *events)

    def scores(self, run: int, values: list[int], minutes: int) -> None:
        ts = self.now - timedelta(minutes=minutes)
        events = [
            {"type": "score", "id": self._id(), "score": v, "ts": (ts + timedelta(seconds=k)).isoformat()}
            for k, v in enumerate(values)
        ]
        ingest(self.project, RUNS[run], *events)

    def state(self, run: int, state: int) -> None:
        ingest(self.project, RUNS[run], {"type": "state", "id": self._id(), "state": STATES[state]})

    def verify(self, sub: int, outcome: int) -> None:
        s = self._submission(sub)
        if s is None:
            return
        if s.status in ("candidate", "invalid"):
            lifecycle.request_verification(s, by=self.by)
        elif s.status == "verifying":
            result = ("passed", "failed")[outcome % 2]
            lifecycle.record_verification(s.pk, VerificationResult(result, 0, "", ""))
        elif s.status == "verified":
            lifecycle.review(s, by=self.by, verdict=("approve", "reject")[outcome % 2])

    def exclude_submission(self, sub: int) -> None:
        s = self._submission(sub)
        if s is not None:
            if s.excluded_at is None:
                lifecycle.exclude_submission(s, by=self.by, reason="junk")
            else:
                lifecycle.include_submission(s, by=self.by)

    def exclude_run(self, run: int) -> None:
        r = self._run(run)
        if r is not None:
            if r.excluded_at is None:
                lifecycle.exclude_run(r, by=self.by, reason="a test run")
            else:
                lifecycle.include_run(r, by=self.by)

    def sync(self, run: int, usd: int, complete: bool) -> None:
        services.record_poll(
            self.project,
            RUNS[run],
            budget_usd=Decimal(usd) / 100,
            source_total_usd=Decimal(usd) / 50 if usd % 2 else None,
            results_complete=complete,
            results_missing=None if complete or usd % 3 == 0 else usd % 7,
        )

    def stall(self, run: int) -> None:
        """The beat's stall check, as if it ran two days from now."""
        services.flag_stalled_runs(now=timezone.now() + timedelta(days=2 + run))

    def delete_rows(self, sub: int) -> None:
        """The admin's delete of event rows: a score, then a turn."""
        s = self._submission(sub)
        if s is not None:
            services.delete_event_rows(Submission.objects.filter(pk=s.pk))
        t = AgentTurn.objects.filter(run__project=self.project).order_by("pk").first()
        if t is not None:
            services.delete_event_rows(AgentTurn.objects.filter(pk=t.pk))

    def delete_run(self, run: int) -> None:
        r = self._finished(run)
        if r is not None:
            services.delete_run(r, by=self.by, confirm=r.external_id)

    def retention(self, run: int) -> None:
        """An archived run past the project's retention: deleted by the policy."""
        r = self._finished(run)
        if r is not None and r.archived_at is None:
            services.archive_run(r, by=self.by)
        Project.objects.filter(pk=self.project.pk).update(retention_archived_run_days=1)
        self.project.refresh_from_db()
        services.apply_retention(self.project, now=timezone.now() + timedelta(days=2))


STEPS = (
    "turns", "scores", "state", "verify", "exclude_submission", "exclude_run", "sync", "stall", "delete_rows",
    "delete_run", "retention",
)  # fmt: skip
run_i = st.integers(0, len(RUNS) - 1)
STEP = st.one_of(
    st.tuples(
        st.just("turns"), run_i, st.lists(st.integers(0, 500), min_size=1, max_size=4), st.integers(0, 2)
    ),
    st.tuples(
        st.just("scores"), run_i, st.lists(st.integers(-5, 20), min_size=1, max_size=4), st.integers(0, 90)
    ),
    st.tuples(st.just("state"), run_i, st.integers(0, len(STATES) - 1)),
    st.tuples(st.just("verify"), st.integers(0, 50), st.integers(0, 1)),
    st.tuples(st.just("verify"), st.integers(0, 50), st.integers(0, 1)),
    st.tuples(st.just("exclude_submission"), st.integers(0, 50)),
    st.tuples(st.just("exclude_run"), run_i),
    st.tuples(st.just("sync"), run_i, st.integers(0, 900), st.booleans()),
    st.tuples(st.just("stall"), run_i),
    st.tuples(st.just("delete_rows"), st.integers(0, 50)),
    st.tuples(st.just("delete_run"), run_i),
    st.tuples(st.just("retention"), run_i),
)
SLUGS = iter(range(10**6))


@pytest.mark.django_db
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same interleavings on every run and both databases
    database=None,
)
@given(steps=st.lists(STEP, min_size=8, max_size=20), minimize=st.booleans())
def test_kept_figures_equal_the_from_scratch_ones_after_any_interleaving(alice, steps, minimize):
    """≥ 120 steps in all (15 examples of 8–20), each followed by the comparison, on whichever database
    the suite runs on (.ci/run: SQLite, then PostgreSQL)."""
    scenario = services.create_scenario(
        key=f"s{next(SLUGS)}", name="s", direction="minimize" if minimize else "maximize"
    )
    project = admin_project(f"figures-{next(SLUGS)}", scenario=scenario, by=alice)
    world = World(project, alice)
    for name, *args in steps:
        world.do(name, *args)
        assert_kept(project, f"{name}{tuple(args)}")


def test_a_seeded_walk_of_200_steps_keeps_the_figures(alice):
    """The same property over one long history (the interleavings pile up in one project)."""
    import random

    rng = random.Random(36)
    project = admin_project("walk", by=alice)
    world = World(project, alice)

    def some(value) -> list:
        return [value() for _ in range(rng.randint(1, 4))]

    for step in range(200):
        name = rng.choice([*STEPS, "scores", "verify", "verify"])
        args = {
            "turns": lambda: (rng.randrange(3), some(lambda: rng.randrange(500)), rng.randrange(3)),
            "scores": lambda: (rng.randrange(3), some(lambda: rng.randint(-5, 20)), rng.randrange(90)),
            "state": lambda: (rng.randrange(3), rng.randrange(len(STATES))),
            "verify": lambda: (rng.randrange(60), rng.randrange(2)),
            "exclude_submission": lambda: (rng.randrange(60),),
            "exclude_run": lambda: (rng.randrange(3),),
            "sync": lambda: (rng.randrange(3), rng.randrange(900), rng.random() < 0.7),
            "stall": lambda: (rng.randrange(3),),
            "delete_rows": lambda: (rng.randrange(60),),
            "delete_run": lambda: (rng.randrange(3),),
            "retention": lambda: (rng.randrange(3),),
        }[name]()  # fmt: skip
        if name in ("delete_run", "retention") and rng.random() < 0.7:
            continue  # rarer, so the project keeps some history
        world.do(name, *args)
        assert_kept(project, f"step {step}: {name}{args}")
    assert set(world.done) == {*STEPS}, world.done  # every kind of write happened
    assert Submission.objects.filter(project=project, status="approved").exists()


# --- what a page reads: a fixed number of queries, no scan of the submissions or the turns ------------


def fill(project: Project, runs: int, per_run: int) -> None:
    """`runs` runs of `per_run` scores and `per_run` turns each, some verified (10× a world: 10× both)."""
    now = timezone.now()
    for r in range(runs):
        ingest(
            project,
            f"run-{r}",
            *[
                {"type": "score", "id": f"s{i}", "score": r + i, "ts": f"{now - timedelta(minutes=i):%FT%T}Z"}
                for i in range(per_run)
            ],
            *[
                {"type": "agent.turn", "id": f"t{i}", "turn": i, "cost_usd": 0.01, "ts": f"{now:%FT%T}Z"}
                for i in range(per_run)
            ],
        )
    ids = list(Submission.objects.filter(project=project).values_list("pk", flat=True)[::3])
    Submission.objects.filter(pk__in=ids).update(status="verified")
    rebuild_project_figures(project.pk, runs=True)  # the raw UPDATE above: as its service would


def statements(read) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        read()
    return [q["sql"] for q in ctx.captured_queries]


def no_scan(sqls: list[str]) -> None:
    """No turn read at all; submissions only by id (the sparkline's scores' standing: SPARK_SCORES per
    project) or as a top of the (project, status, score…) index."""
    for sql in sqls:
        assert "tracking_agentturn" not in sql, sql
        if "tracking_submission" in sql:
            assert re.search(r'"tracking_submission"\."id" IN \(', sql), sql


@pytest.mark.parametrize("page", ["overview", "project page"])
def test_the_figures_read_the_same_queries_at_1x_and_10x_and_scan_no_submissions_or_turns(alice, page):
    small, big = admin_project("small", by=alice), admin_project("big", by=alice)
    fill(small, runs=3, per_run=10)
    fill(big, runs=30, per_run=100)
    reads = {}
    for p in (small, big):
        p = Project.objects.select_related("scenario").get(pk=p.pk)
        if page == "overview":
            reads[p.slug] = statements(lambda p=p: queries.project_summaries([p]))
        else:  # the figures above the runs table: condition counts, results gap, what waits to count
            reads[p.slug] = statements(
                lambda p=p: (
                    queries.run_condition_counts(p),
                    queries.results_gap(p),
                    queries.pending_scores(p),
                )
            )
        no_scan(reads[p.slug])
        for unverified in (False, True):
            if page == "overview":
                assert cents(maintained(p, unverified)) == cents(reference(p, unverified))
    assert len(reads["small"]) == len(reads["big"]), reads
    big_pending = queries.pending_scores(Project.objects.select_related("scenario").get(slug="big"))
    waiting = Submission.objects.filter(project__slug="big", status="candidate")
    assert waiting.count() == 2000  # 3,000 scores, a third verified
    best = waiting.order_by("-score").first().score
    assert (big_pending.label, big_pending.more, big_pending.best) == ("1,000+", True, best)


def test_the_overview_page_reads_no_submissions_or_turns_beyond_the_sparklines(client, alice):
    project = admin_project("hill", by=alice)
    fill(project, runs=5, per_run=20)
    client.force_login(alice)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/")
    assert response.status_code == 200 and 'href="/projects/hill/"' in response.content.decode()
    no_scan([q["sql"] for q in ctx.captured_queries])


def test_a_budget_given_as_text_moves_the_figures_as_the_row_will_read(alice):
    """A sync's or a form's fields arrive as text ("4.5"): the run's share is read from typed values."""
    project = admin_project("typed", by=alice)
    now = timezone.now()
    ingest(project, "r1", {"type": "agent.turn", "turn": 1, "cost_usd": 5.0, "ts": now.isoformat()})
    services.update_run_settings(project, "r1", budget_usd="4.5", budget_tokens="100")
    assert maintained(project, False)["over_budget"] == 1
    assert_kept(project, "a budget given as text")
    services.update_run_settings(project, "r1", budget_usd="9.5", budget_tokens=None)
    assert maintained(project, False)["over_budget"] == 0
    assert_kept(project, "a budget raised")
