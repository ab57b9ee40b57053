"""Arms over the API (`…/compare/series?group=`): runs grouped by a param, a tag, the profile, the kickoff or
the project; each arm's table equals what its runs' own API answers say, its line is the median of its runs
at equal x, and two arms are said apart only when the data can tell them apart."""

from __future__ import annotations

import random
import statistics

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import Role, Run, RunLaunch
from smrweb.tracking.queries import arms
from tests.api.test_compare_series import URL, at
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db


def arm_run(
    project, run_id: str, *, level: float, cost: float, seed: int, params=None, tags=None, state=None
):
    """A run of 20 turns whose five scores climb around `level` (noise 0.05), with `params` and `tags`."""
    rng = random.Random(seed)
    events = [{"type": "state", "state": "running", "ts": at(0)}]
    for i in range(20):
        events.append(
            {
                "id": f"t{i}",
                "type": "agent.turn",
                "turn": i,
                "ts": at(i + 1),
                "tokens_in": 100,
                "cost_usd": cost,
            }
        )
    for k in range(5):
        score = level + 0.02 * k + rng.uniform(-0.05, 0.05)
        events.append({"id": f"s{k}", "type": "score", "score": score, "ts": at(4 * k + 2.5)})
    if state:
        events.append({"type": "state", "state": state, "ts": at(30)})
    push(project, run_id, *events)
    run = Run.objects.get(project=project, external_id=run_id)
    admin = project.memberships.get(role=Role.ADMIN).user
    services.log_params(run, list((params or {}).items()), by=admin)
    for key, value in (tags or {}).items():
        services.set_tag(run, key=key, value=value, by=admin)
    return run


@pytest.fixture
def two_arms(project):
    fast = [
        arm_run(project, f"fast{i}", level=0.8, cost=0.01, seed=i, params={"lr": "0.01"}) for i in range(6)
    ]
    slow = [
        arm_run(project, f"slow{i}", level=0.2, cost=0.03, seed=10 + i, params={"lr": "0.003"}, state=state)
        for i, state in enumerate([None, None, None, None, "failed", "abandoned"])
    ]
    return fast, slow


def series(api, runs, **params):
    answer = api.get(URL, {"runs": ",".join(r.external_id for r in runs), "x": "usd", **params})
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_each_arms_table_is_what_its_runs_api_answers_say(api, two_arms):
    fast, slow = two_arms
    body = series(api, fast + slow, group="param:lr")
    assert [(a["arm"], a["n"]) for a in body["arms"]] == [("0.003", 6), ("0.01", 6)]
    for arm, runs in zip(sorted(body["arms"], key=lambda a: a["arm"]), (slow, fast), strict=True):
        own = [api.get(f"/api/v1/projects/hill/runs/{r.external_id}").json() for r in runs]
        assert set(arm["runs"]) == {r.external_id for r in runs}
        usd = [float(o["spend"]["usd"]) for o in own]
        assert arm["usd"] == {
            "median": pytest.approx(statistics.median(usd)),
            "min": min(usd),
            "max": max(usd),
        }
        best = [o["best_score"] for o in own]
        assert arm["best_score"]["median"] == pytest.approx(statistics.median(best))
        final = [o["latest_score"] for o in own]
        assert arm["final_score"]["median"] == pytest.approx(statistics.median(final))
        tokens = [o["spend"]["tokens_in"] + o["spend"]["tokens_out"] for o in own]
        assert arm["tokens"]["median"] == pytest.approx(statistics.median(tokens))
        assert arm["failed_share"] == pytest.approx(
            sum(o["state"] in ("failed", "abandoned") for o in own) / 6
        )
        assert arm["band"] == "iqr"


def test_the_line_is_the_median_of_the_runs_best_so_far_at_equal_spend(api, two_arms):
    fast, _ = two_arms
    body = series(api, fast, group="param:lr")
    traces = {t["run"]: t for t in body["runs"]}
    (arm,) = body["arms"]
    assert arm["line"][0][0] >= 0 and arm["line"][-1][0] == pytest.approx(
        max(t["x_total"] for t in traces.values())
    )
    checked = 0
    for x, median, low, high, n in arm["line"]:
        values = []
        for t in traces.values():
            if x > t["x_total"] + 1e-12:
                continue
            before = [y for bx, y in t["best"] if bx <= x]
            if before:
                values.append(before[-1])
        assert n == len(values)
        assert median == pytest.approx(statistics.median(values)) and low <= median <= high
        checked += 1
    assert checked > 40


def test_arms_far_apart_are_told_apart_and_arms_alike_are_not(api, project, two_arms):
    fast, slow = two_arms
    body = series(api, fast + slow, group="param:lr")
    (diff,) = body["differences"]
    assert diff["against"] == "0.01" and diff["arm"] == "0.003" and diff["separable"] is True
    assert (diff["ahead"], diff["behind"]) == ("0.01", "0.003") and 0 < diff["low"] <= diff["margin"]
    assert diff["x"] == pytest.approx(0.2)  # both arms' median run reached $0.20
    assert diff["p"] == pytest.approx(2 / 924)  # of the 924 ways to split their 12 runs, theirs alone
    alike = [
        arm_run(project, f"same{i}", level=0.5, cost=0.01, seed=30 + i, tags={"kickoff": "ab"[i % 2]})
        for i in range(6)
    ]
    (same,) = series(api, alike, group="tag:kickoff")["differences"]
    assert same["separable"] is False and same["low"] < 0 < same["high"] and same["p"] >= 0.1


def test_groups_by_profile_kickoff_and_project(api, client, alice, project, two_arms):
    fast, slow = two_arms
    Run.objects.filter(pk__in=[r.pk for r in fast]).update(actual_profile="sonnet")
    by_profile = series(api, fast + slow, group="profile")
    assert {(a["arm"], a["n"]) for a in by_profile["arms"]} == {("sonnet", 6), ("(none)", 6)}
    for run in fast[:3]:
        RunLaunch.objects.create(
            project=project,
            run=run,
            kickoff="Try the wider search first.\nThen narrow.",
            requested_by=alice,
            idempotency_key=f"k-{run.pk}",
        )
    by_kickoff = series(api, fast, group="kickoff")
    assert {(a["arm"], a["n"]) for a in by_kickoff["arms"]} == {
        ("Try the wider search first.", 3),
        ("(none)", 3),
    }
    other = admin_project("mine", by=alice)
    arm_run(other, "m1", level=0.5, cost=0.02, seed=99)
    client.force_login(alice)
    body = client.get(URL, {"runs": "fast0,fast1,mine:m1", "group": "project"}).json()
    assert {(a["arm"], a["n"]) for a in body["arms"]} == {("hill", 2), ("mine", 1)}


def test_bad_groupings_are_refused_with_the_field_named(api, project, two_arms):
    fast, _ = two_arms
    bad = api.get(URL, {"runs": "fast0", "group": "colour"})
    assert bad.status_code == 400 and [e["field"] for e in bad.json()["errors"]] == ["group"]
    many = [
        arm_run(project, f"m{i}", level=0.5, cost=0.01, seed=i, params={"seed": str(i)}) for i in range(13)
    ]
    too_many = api.get(URL, {"runs": ",".join(r.external_id for r in many), "group": "param:seed"})
    assert too_many.status_code == 400 and f"at most {arms.MAX_ARMS}" in str(too_many.json())


def test_two_runs_a_side_are_too_few_to_tell_arms_apart_however_far(api, project):
    runs = [arm_run(project, f"a{i}", level=0.9, cost=0.01, seed=i, params={"arm": "a"}) for i in range(2)]
    runs += [
        arm_run(project, f"b{i}", level=0.1, cost=0.01, seed=5 + i, params={"arm": "b"}) for i in range(2)
    ]
    (diff,) = series(api, runs, group="param:arm")["differences"]
    # The bootstrap interval excludes 0, but of the 6 ways to split 4 runs in two, 2 are this far apart.
    assert diff["low"] > 0 and diff["fewest"] == 2 and diff["p"] == pytest.approx(2 / 6)
    assert diff["separable"] is False


@pytest.mark.parametrize("x", ["usd", "tokens", "turns", "time", "wall", "step"])
def test_arms_on_every_axis_of_a_score_and_a_metric(api, project, x):
    runs = [
        arm_run(project, f"x{i}", level=0.2 + 0.6 * (i % 2), cost=0.01, seed=i, tags={"arm": "ab"[i % 2]})
        for i in range(8)
    ]
    for run in runs:
        push(
            project,
            run.external_id,
            *[
                {"type": "metric", "key": "loss", "step": s, "value": s / 10, "ts": at(s + 0.5)}
                for s in range(10)
            ],
        )
    for metric in ("score", "loss"):
        body = series(api, runs, group="tag:arm", x=x, metric=metric)
        assert [a["n"] for a in body["arms"]] == [4, 4] and all(a["line"] for a in body["arms"])
        (diff,) = body["differences"]
        assert diff["fewest"] == 4 and 0 <= diff["p"] <= 1
        if metric == "score":  # the arms do not overlap: exactly 2 of the 70 ways to split 8 runs rank so far
            assert diff["p"] == pytest.approx(2 / 70) and diff["separable"] is True
