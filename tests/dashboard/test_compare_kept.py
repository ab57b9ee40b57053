"""Compare after new data: what is kept per compared run (its row and series, its turn side advanced by the
turns past those kept) gives what a read from scratch gives, after random changes to random runs; and a
new turn in a long run reads that turn, not every turn of the run."""

import contextlib
import random
from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.core import cachekeys, localcache, softcache
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.dashboard.charts import style
from smrweb.dashboard.templatetags.smrweb import figure_text
from smrweb.tracking import services
from smrweb.tracking.models import Run, Submission
from smrweb.tracking.queries import compare, compare_turns
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


class Turns:
    """Turns and scores for one run, numbered so that no two collide."""

    def __init__(self, rng: random.Random):
        self.rng, self.n = rng, 0

    def turn(self, t: float) -> dict:
        self.n += 1
        actor = self.rng.choice(["driver", "w1", "w2", None])
        event = {
            "type": "agent.turn",
            "turn": self.n,
            "actor": actor or "someone",
            "cost_usd": round(self.rng.uniform(0, 0.05), 6),
            "tokens_in": self.rng.randrange(2000),
            "tokens_out": self.rng.randrange(300),
            "tool_calls": [{"name": "sh"}] * self.rng.randrange(3),
            "ts": at(t),
        }
        if self.rng.random() < 0.8:
            event["duration_ms"] = self.rng.randrange(100, 5000)
        if actor in ("w1", "w2"):
            event["parent_actor"] = "driver"
        return event

    def score(self, t: float) -> dict:
        return {"type": "score", "score": round(self.rng.uniform(0, 1), 4), "ts": at(t)}


@contextlib.contextmanager
def _nothing_kept_here():
    """Neither this process's copies (core.localcache) seen nor what is kept meanwhile left behind."""
    kept = dict(localcache._KEPT)
    localcache.clear()
    try:
        yield
    finally:
        localcache.clear()
        localcache._KEPT.update(kept)


def _scratch(project, ids, monkeypatch):
    """The comparison read from the rows alone: nothing found kept, nothing kept by it."""
    with monkeypatch.context() as m, _nothing_kept_here():
        m.setattr(softcache, "get_many", lambda keys, also=(): {})
        m.setattr(softcache, "set_many", lambda values, timeout, **kw: None)
        return _read(project, ids)


def _read(project, ids, points=48):
    """As the page reads them; few points per run, so that a run's spend rows are thinned (a stride above
    1, which moves as turns come) even with a few dozen turns."""
    markers, _ = compare.find_markers(project, ids)
    return compare.compare(project, ids, markers=markers, points=points)


def _same(kept: compare.Comparison, scratch: compare.Comparison, monkeypatch) -> None:
    assert [s.run.external_id for s in kept.runs] == [s.run.external_id for s in scratch.runs]
    for a, b in zip(kept.runs, scratch.runs):
        for f in fields(compare.RunSeries):
            if f.name != "run":
                assert getattr(a, f.name) == getattr(b, f.name), (a.run.external_id, f.name)
    # What the page shows of them: the figures assembled from the runs' kept parts are the figures of the
    # comparison read from scratch, encoded whole; both tables' rows, as written.
    built = compare_charts.build(kept)
    with monkeypatch.context() as m, _nothing_kept_here():  # the rows written from scratch: none found kept
        m.setattr(softcache, "get_many", lambda keys, also=(): {})
        m.setattr(softcache, "set_many", lambda values, timeout, **kw: None)
        fresh = compare_charts.build(scratch)
    colours = [style.colour(i) for i in range(len(scratch.runs))]
    unit, key = compare_charts.time_unit(scratch), compare_charts.uirevision(scratch)
    whole = {
        "score_figure": compare_charts.score_figure(scratch, colours, unit, uirevision=key),
        "spend_figure": compare_charts.spend_figure(scratch, colours, unit, uirevision=key),
        "turns_figure": compare_charts.turns_figure(scratch, colours, uirevision=key),
    }
    for name, figure in whole.items():
        assert built[name] == (figure_text(figure) if figure else None), name
        assert built["points"][name] == compare_charts.points(figure), name
    assert [r.side_by_side_html for r in built["rows_shown"]] == [
        r.side_by_side_html for r in fresh["rows_shown"]
    ]
    assert [r.turns_html for r in built["rows_shown"]] == [r.turns_html for r in fresh["rows_shown"]]


def test_kept_runs_equal_a_read_from_scratch_after_random_changes(project, alice, bob, monkeypatch):
    rng = random.Random(36)
    names = [f"r{i}" for i in range(6)]
    makers = {name: Turns(rng) for name in names}
    clock = {name: 0.0 for name in names}
    for name in names[:5]:  # r5 has nothing yet: it enters with its first turn
        # Enough turns that the spend rows are thinned (a stride above 1) with few points per run.
        events = []
        for _ in range(rng.randrange(30, 90)):
            clock[name] += rng.uniform(1, 30)
            events.append(makers[name].turn(clock[name]))
            if rng.random() < 0.9:  # with 48 points over 5-6 runs, scores are thinned too past 32
                events.append(makers[name].score(clock[name] + 0.5))
        push(project, name, *events)
    compared = names[:5]
    added = []  # each time turns were added to what was kept rather than read whole
    real_added = compare_turns._added
    monkeypatch.setattr(compare_turns, "_added", lambda *a: added.append(r := real_added(*a)) or r)
    scored = []  # each time scores were added to the kept score rows rather than read whole
    real_scored = compare._scores_added
    monkeypatch.setattr(compare, "_scores_added", lambda *a: scored.append(r := real_scored(*a)) or r)
    for _ in range(80):
        name = rng.choice(names)
        what = rng.choices(
            ["turns", "late", "score", "scores", "exclude", "verify", "delete", "leave", "enter"],
            [8, 2, 3, 3, 1, 1, 1, 1, 1],
        )[0]
        if what == "turns":  # later than every turn so far: added to what is kept
            events = []
            for _ in range(rng.choice([1, 1, 2, 7])):
                clock[name] += rng.uniform(0.5, 20)
                events.append(makers[name].turn(clock[name]))
            push(project, name, *events)
        elif what == "late":  # earlier than the run's latest turn: the run is read whole again
            push(project, name, makers[name].turn(rng.uniform(0, clock[name])))
        elif what == "score":  # now and then earlier than the run's last score: read whole again
            push(project, name, makers[name].score(clock[name] + rng.uniform(-50, 5)))
        elif what == "scores":  # later than every score so far, with a turn now and then: added
            events = []
            for _ in range(rng.choice([1, 1, 2, 5, 9])):
                clock[name] += rng.uniform(1, 20)
                # rising now and then, so that new bests come among them, not only last
                events.append(
                    {**makers[name].score(clock[name]), "score": rng.uniform(0.5, 1) + clock[name] / 2000}
                )
                if rng.random() < 0.3:
                    events.append(makers[name].turn(clock[name] + 0.5))
            push(project, name, *events)
        elif what == "delete":  # a score deleted (the admin's delete): read whole again
            if sub := Submission.objects.filter(run__project=project).order_by("?").first():
                services.delete_event_rows(Submission.objects.filter(pk=sub.pk))
        elif what == "exclude":
            if (
                sub := Submission.objects.filter(run__project=project, excluded_at__isnull=True)
                .order_by("?")
                .first()
            ):
                lifecycle.exclude_submission(sub, by=alice, reason="a leaked test set")
        elif what == "verify":
            if (
                sub := Submission.objects.filter(run__project=project, status="candidate")
                .order_by("?")
                .first()
            ):
                lifecycle.request_verification(sub, by=bob)
                outcome = rng.choice(["passed", "failed"])
                lifecycle.record_verification(sub.pk, lifecycle.VerificationResult(outcome, 0, "", outcome))
        elif what == "leave" and len(compared) > 2:
            compared.remove(rng.choice(compared))
        elif what == "enter":
            compared = [*{*compared, name}]
            rng.shuffle(compared)  # another baseline, other colours
        ids = [rid for rid in compared if Run.objects.filter(project=project, external_id=rid).exists()]
        if len(ids) < 2:
            continue
        kept = _read(project, ids)
        _same(kept, _scratch(project, ids, monkeypatch), monkeypatch)
        # Each run's kept score rows (extended by the scores since) are those a read from scratch keeps.
        per_run = compare.resolution(len(ids), 48) * compare.SCORE_OVERSAMPLE
        maximize = project.scenario.maximize
        for run in Run.objects.filter(project=project, external_id__in=ids):
            key = cachekeys.compare_scores(run.pk, maximize=maximize, per_run=per_run)
            scratch = compare._read_scores({run.pk: run}, maximize=maximize, per_run=per_run)[run.pk]
            assert softcache.get(key) == scratch, run.external_id
    assert sum(1 for base in added if base is not None) >= 10  # the kept path was taken, and often
    assert sum(1 for base in scored if base is not None) >= 10
    # with thinned score rows (a stride above 1) too
    assert any(base is not None and base.rows and base.rows[1][0] > 2 for base in scored)


def test_a_new_turn_in_a_long_run_reads_that_turn_not_every_turn(project):
    rng = random.Random(7)
    maker = Turns(rng)
    push(project, "long", *[maker.turn(i) for i in range(1, 400)], maker.score(5))
    push(project, "short", Turns(rng).turn(1), Turns(rng).turn(2))
    ids = ["long", "short"]
    _read(project, ids)
    push(project, "long", maker.turn(400))
    with CaptureQueriesContext(connection) as seen:
        c = _read(project, ids)
    turns = [q["sql"] for q in seen.captured_queries if "tracking_agentturn" in q["sql"]]
    assert len(turns) == 1, turns  # the turns past those kept: one, by the run's id index
    assert "OVER" not in turns[0] and "GROUP BY" not in turns[0], turns[
        0
    ]  # no window, no aggregate of every turn
    assert c.runs[0].run.turn_count == 400 and c.runs[0].spend[-1][1] == pytest.approx(
        float(Run.objects.get(external_id="long").cost_usd)
    )


def test_after_one_change_the_page_writes_that_runs_figure_parts_and_rows_alone(
    client_alice, project, monkeypatch
):
    rng = random.Random(5)
    ids = [f"r{i:02d}" for i in range(12)]
    for rid in ids:
        maker = Turns(rng)
        push(project, rid, *[maker.turn(t) for t in range(1, 6)], maker.score(3), maker.score(4))
    url = f"/projects/{project.slug}/compare/?" + "&".join(f"runs={rid}" for rid in ids)
    written = []
    real = compare_charts.run_parts
    monkeypatch.setattr(
        compare_charts, "run_parts", lambda s, *a: written.append(s.run.external_id) or real(s, *a)
    )
    rows, real_rows = [], compare_charts.rows
    monkeypatch.setattr(
        compare_charts,
        "rows",
        lambda c, col, i, j, **kw: rows.append(c.runs[i].run.external_id) or real_rows(c, col, i, j, **kw),
    )
    assert client_alice.get(url).status_code == 200
    assert sorted(written) == sorted(rows) == ids  # the first view writes every run's parts and rows
    written.clear()
    rows.clear()
    push(project, "r05", Turns(rng).score(9))
    body = client_alice.get(url).content.decode()
    assert written == ["r05"]
    assert '"name":"r05"' in body and "compare-score-data" in body
    assert rows == ["r05"]  # and its rows alone (the baseline, r00, did not change)


def test_a_new_score_in_a_long_run_reads_that_score_not_every_score(project):
    rng = random.Random(8)
    maker = Turns(rng)
    push(project, "long", *[e for i in range(1, 400) for e in (maker.turn(i), maker.score(i + 0.5))])
    push(project, "short", Turns(rng).turn(1), Turns(rng).score(2))
    ids = ["long", "short"]
    _read(project, ids)
    push(project, "long", maker.turn(400), {**maker.score(400.5), "score": 2.0})  # a new best, too
    with CaptureQueriesContext(connection) as seen:
        c = _read(project, ids)
    scores = [q["sql"] for q in seen.captured_queries if "tracking_submission" in q["sql"]]
    assert len(scores) == 1, scores  # the scores past those kept: one, by the run's id index
    assert "OVER" not in scores[0] and "GROUP BY" not in scores[0], scores[0]  # no window over every score
    long = c.runs[0]
    assert long.run.score_count == 400 and long.scores[-1][1] == 2.0 and long.frontier[-1][1] == 2.0
    push(project, "long", maker.turn(401))  # a turn alone: no score row read
    with CaptureQueriesContext(connection) as seen:
        _read(project, ids)
    [scores] = [q["sql"] for q in seen.captured_queries if "tracking_submission" in q["sql"]]
    assert "OVER" not in scores, scores


def test_after_new_data_in_the_baseline_the_kept_parts_of_10_or_100_runs_come_in_one_round_trip(
    client_alice, project, monkeypatch
):
    """The first view after a new turn and score in the baseline: as many cache round trips for 100 runs
    as for 10, one of them for the kept runs, series, figure parts and first rows, which asks the shared
    cache for the baseline's alone (the others are this process's copies, `_kept_runs`); the baseline's
    parts and rows alone written again (the others' deltas are filled in their kept rows)."""
    rng = random.Random(9)
    ids = [f"r{i:03d}" for i in range(100)]
    makers = {rid: Turns(rng) for rid in ids}
    for rid in ids:
        push(project, rid, *[makers[rid].turn(t) for t in range(1, 4)], makers[rid].score(2))
    calls, real_get_many = [], softcache.get_many
    monkeypatch.setattr(
        softcache, "get_many", lambda keys, also=(): calls.append(list(keys)) or real_get_many(keys, also)
    )
    written, real_rows = [], compare_charts.rows
    monkeypatch.setattr(
        compare_charts,
        "rows",
        lambda c, col, i, j, **kw: written.append(c.runs[i].run.external_id) or real_rows(c, col, i, j, **kw),
    )

    def after_change(n: int, t: int) -> list[list[str]]:
        url = f"/projects/{project.slug}/compare/?runs=" + ",".join(ids[:n])
        assert client_alice.get(url).status_code == 200
        push(project, "r000", makers["r000"].turn(t), makers["r000"].score(t + 0.5))
        calls.clear()
        written.clear()
        assert client_alice.get(url).status_code == 200
        assert written == ["r000"]  # the baseline's rows alone, though every row's deltas moved
        return list(calls)

    ten, hundred = after_change(10, 10), after_change(100, 20)
    assert len(hundred) == len(ten), (ten, hundred)
    for calls_made in (ten, hundred):
        per_run = [keys for keys in calls_made if any(k.startswith("compare-run:") for k in keys)]
        assert len(per_run) == 1, calls_made  # one round trip for the runs' kept parts
        changed = Run.objects.get(project=project, external_id="r000").pk
        assert sorted(k.split(":")[0] for k in per_run[0]) == ["compare-parts", "compare-row", "compare-run"]
        assert all(f":{changed}:" in k for k in per_run[0]), per_run[0]  # the baseline's alone


def test_a_view_reads_other_runs_from_its_own_process_and_attaches_its_project_to_its_own_copy(project):
    """A second view after one run's change asks the shared cache for that run alone; the runs it takes from
    this process's copies are its own (a view sets its project on them; the kept copy stays without one)."""
    rng = random.Random(4)
    ids = [f"r{i:02d}" for i in range(12)]
    makers = {rid: Turns(rng) for rid in ids}
    for rid in ids:
        push(project, rid, makers[rid].turn(1), makers[rid].score(1.5))
    first = _read(project, ids)
    push(project, "r03", makers["r03"].turn(5))
    asked, real_get_many = [], softcache.get_many
    with pytest.MonkeyPatch.context() as m:
        m.setattr(
            softcache, "get_many", lambda keys, also=(): asked.append(list(keys)) or real_get_many(keys, also)
        )
        second = _read(project, ids)
    run_keys = [k for keys in asked for k in keys if k.startswith("compare-run:")]
    changed = Run.objects.get(project=project, external_id="r03")
    assert len(run_keys) == 1 and run_keys[0].startswith(f"compare-run:v1:{changed.pk}:"), run_keys
    kept = localcache.get(("compare-runs", project.pk))
    for a, b in zip(first.runs, second.runs, strict=True):
        assert a.run is not b.run and b.run.project is project and b.run.external_id == a.run.external_id
    assert all("project" not in run._state.fields_cache for run, _ in kept.values())
