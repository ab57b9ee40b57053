"""`POST`/`GET /api/v1/projects/{slug}/runs/{run}/logs`: a run's log pushed in batches (all or nothing,
idempotent by batch id, capped per request and per run) and read back by seq."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking.models import LOG_LINE_MAX, LogLevel, LogSource, Run, RunLogBatch, RunLogLine
from smrweb.tracking.services import logs as log_service
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db

URL = "/api/v1/projects/{slug}/runs/{run}/logs"


def url(run="r1", slug="hill", **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return URL.format(slug=slug, run=run) + (f"?{query}" if query else "")


def push(client, body, run="r1", slug="hill"):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.generic("POST", url(run, slug), raw, content_type="application/json")


def texts(run_id="r1"):
    return list(
        RunLogLine.objects.filter(run__external_id=run_id).order_by("seq").values_list("text", flat=True)
    )


def test_a_batch_is_kept_in_order_and_creates_the_run(api):
    response = push(
        api,
        {
            "batch_id": "b1",
            "stream": "stdout",
            "lines": [
                {"text": "starting", "ts": "2026-12-01T10:00:00Z"},
                {"text": "disk almost full", "level": "warning", "stream": "stderr"},
                "plain string line",
                {"text": "boom", "level": 40},
            ],
        },
    )
    assert response.status_code == 201, response.content
    assert response.json() == {
        "batch_id": "b1", "kept": 4, "dropped": 0, "first_seq": 1, "last_seq": 4, "repeat": False
    }  # fmt: skip
    lines = list(RunLogLine.objects.order_by("seq"))
    assert [(x.seq, x.level, x.stream, x.source) for x in lines] == [
        (1, LogLevel.INFO, "stdout", LogSource.PUSH),
        (2, LogLevel.WARNING, "stderr", LogSource.PUSH),
        (3, LogLevel.INFO, "stdout", LogSource.PUSH),
        (4, LogLevel.ERROR, "stdout", LogSource.PUSH),
    ]
    assert lines[0].ts.isoformat() == "2026-12-01T10:00:00+00:00"
    run = Run.objects.get(external_id="r1")
    assert (run.log_lines, run.log_lines_dropped, run.log_warnings) == (4, 0, 2)


def test_the_same_batch_id_again_writes_nothing_and_answers_the_first_result(api):
    body = {"batch_id": "b1", "lines": ["a", "b"]}
    first = push(api, body).json()
    again = push(api, {"batch_id": "b1", "lines": ["c", "d", "e"]})
    assert again.status_code == 200
    assert again.json() == {**first, "repeat": True}
    assert texts() == ["a", "b"]
    second = push(api, {"batch_id": "b2", "lines": ["c"]}).json()
    assert (second["first_seq"], second["last_seq"]) == (3, 3)
    assert Run.objects.get().log_lines == 3


def test_texts_are_split_cleaned_and_cut(api):
    long = "x" * (LOG_LINE_MAX + 25)
    push(
        api,
        {
            "batch_id": "b1",
            "lines": [
                {"text": 'Traceback (most recent call last):\n  File "a.py"\r\nValueError: no\n'},
                {"text": "\x1b[31mred\x1b[0m\tand a bell\x07 and a NUL\x00"},
                {"text": long},
                {"text": ""},
            ],
        },
    )
    assert texts() == [
        "Traceback (most recent call last):",
        '  File "a.py"',
        "ValueError: no",
        "red\tand a bell and a NUL",
        "x" * LOG_LINE_MAX + " …[cut 25 chars]",
        "",
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lines": ["a"]}, "batch_id"),
        ({"batch_id": "", "lines": ["a"]}, "batch_id"),
        ({"batch_id": "x" * 201, "lines": ["a"]}, "batch_id"),
        ({"batch_id": "b", "lines": "a"}, "lines"),
        ({"batch_id": "b", "lines": ["ok", {"text": 3}]}, "lines[1].text"),
        ({"batch_id": "b", "lines": ["ok", "ok", {"text": "t", "level": "loud"}]}, "lines[2].level"),
        ({"batch_id": "b", "lines": [{"text": "t", "ts": "yesterday"}]}, "lines[0].ts"),
        ({"batch_id": "b", "lines": [{"text": "t", "ts": "0001-01-01T00:00:00Z"}]}, "lines[0].ts"),
        ({"batch_id": "b", "lines": [{"text": "t", "stream": "s" * 201}]}, "lines[0].stream"),
        ({"batch_id": "b", "lines": [{"text": "t", "msg": "typo"}]}, "lines[0].msg"),
        ({"batch_id": "b", "lines": [7]}, "lines[0]"),
        ({"batch_id": "b", "lines": [], "extra": 1}, "extra"),
        ({"batch_id": "b", "lines": [], "stream": 5}, "stream"),
        ([{"text": "a list, not a batch"}], "body"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(api, body, field):
    error = assert_json_error(push(api, body), 400)
    assert field in [e["field"] for e in error["errors"]], error
    assert not Run.objects.exists() and not RunLogLine.objects.exists() and not RunLogBatch.objects.exists()


def test_not_json_is_a_400(api):
    assert_json_error(push(api, b"{not json"), 400)


def test_a_batch_over_the_request_cap_is_refused_whole(api):
    over = {"batch_id": "b", "lines": ["x"] * (log_service.MAX_LOG_LINES_PER_BATCH + 1)}
    error = assert_json_error(push(api, over), 400, "invalid_log_lines")
    assert error["errors"][0]["field"] == "lines" and "5000" in error["errors"][0]["message"]
    # Newlines count: one text of 5,001 lines is over too.
    split_over = {"batch_id": "b", "lines": ["\n".join(["y"] * (log_service.MAX_LOG_LINES_PER_BATCH + 1))]}
    assert assert_json_error(push(api, split_over), 400)["errors"][0]["field"] == "lines"
    assert not RunLogLine.objects.exists()
    assert (
        push(api, {"batch_id": "b", "lines": ["x"] * log_service.MAX_LOG_LINES_PER_BATCH}).status_code == 201
    )


def test_lines_past_the_run_cap_are_counted_as_dropped(api, settings):
    settings.SMRWEB_LOG_LINES_PER_RUN = 5
    first = push(api, {"batch_id": "b1", "lines": ["1", "2", "3"]}).json()
    second = push(api, {"batch_id": "b2", "lines": ["4", "5", "6", "7"]}).json()
    third = push(api, {"batch_id": "b3", "lines": ["8"]}).json()
    assert (first["kept"], first["dropped"]) == (3, 0)
    assert (second["kept"], second["dropped"], second["last_seq"]) == (2, 2, 5)
    assert (third["kept"], third["dropped"], third["first_seq"]) == (0, 1, None)
    run = Run.objects.get()
    assert (run.log_lines, run.log_lines_dropped) == (5, 3)
    assert texts() == ["1", "2", "3", "4", "5"]
    assert RunLogBatch.objects.get(batch_id="b2").dropped == 2


def test_who_may_push_and_read(api, project, alice, bob, victor, carol, anon_api, other_project):
    from smrweb.tracking import services

    assert push(session_client(alice), {"batch_id": "a", "lines": ["by alice"]}).status_code == 201
    assert_json_error(push(session_client(bob), {"batch_id": "b", "lines": ["by bob"]}), 403)
    assert_json_error(push(anon_api, {"batch_id": "c", "lines": ["anon"]}), 401)
    assert_json_error(push(session_client(carol), {"batch_id": "d", "lines": ["carol"]}), 404)
    other_token = services.create_api_token(other_project, name="o")[1]
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert_json_error(push(anon_api, {"batch_id": "e", "lines": ["other"]}), 403)
    assert texts() == ["by alice"]
    assert session_client(victor).get(url()).json()["lines"][0]["text"] == "by alice"
    assert_json_error(session_client(carol).get(url()), 404)
    assert_json_error(api.get(url(run="nope")), 404)


def test_an_archived_run_takes_no_lines(api, alice):
    from smrweb.tracking import services

    push(api, {"batch_id": "b1", "lines": ["a"]})
    run = Run.objects.get()
    run.state = "done"
    run.save()
    services.archive_run(run, by=alice)
    assert push(api, {"batch_id": "b2", "lines": ["b"]}).status_code == 409
    assert texts() == ["a"]


@pytest.fixture
def logged(api):
    lines = [
        {"text": f"line {i}" + (" Boom" if i % 10 == 0 else ""), "level": "error" if i % 10 == 0 else "info"}
        for i in range(1, 51)
    ]
    push(api, {"batch_id": "b1", "lines": lines})


def test_reading_pages_by_seq(api, logged):
    tail = api.get(url(limit=5)).json()
    assert [x["seq"] for x in tail["lines"]] == [46, 47, 48, 49, 50]
    assert (tail["has_older"], tail["has_newer"], tail["first_seq"], tail["last_seq"]) == (
        True,
        False,
        46,
        50,
    )
    assert tail["counts"] == {"kept": 50, "dropped": 0, "warnings": 5}
    assert tail["lines"][-1] == {
        "seq": 50, "ts": tail["lines"][-1]["ts"], "level": "error", "levelno": 40, "text": "line 50 Boom",
        "source": "push", "stream": "",
    }  # fmt: skip
    back = api.get(url(before=46, limit=3)).json()
    assert [x["seq"] for x in back["lines"]] == [43, 44, 45] and back["has_newer"]
    forward = api.get(url(after=48)).json()
    assert [x["seq"] for x in forward["lines"]] == [49, 50] and not forward["has_newer"]
    newest_first = api.get(url(limit=3, order="desc")).json()
    assert [x["seq"] for x in newest_first["lines"]] == [50, 49, 48]


def test_reading_filters_by_level_and_text(api, logged):
    errors = api.get(url(level="warning")).json()
    assert [x["seq"] for x in errors["lines"]] == [10, 20, 30, 40, 50]
    assert [x["seq"] for x in api.get(url(q="BOOM", after=20)).json()["lines"]] == [30, 40, 50]
    assert [x["seq"] for x in api.get(url(q="line 4")).json()["lines"]] == [4, *range(40, 50)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"after": "x"}, "after"),
        ({"before": "-1"}, "before"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"level": "loud"}, "level"),
        ({"order": "sideways"}, "order"),
    ],
)
def test_bad_read_parameters_are_400s_naming_them(api, logged, params, field):
    assert assert_json_error(api.get(url(**params)), 400)["errors"][0]["field"] == field
