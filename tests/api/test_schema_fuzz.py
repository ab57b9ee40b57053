"""Schemathesis against the OpenAPI document at /api/schema/: every operation, with a project token, with
a signed-in admin's session and without valid credentials, answers no 5xx, and every answer has a
status code, a content type and a body the document declares for it.

The schema is fetched from the app in-process at collection time; requests go through Django's WSGI
handler in-process too, on the test database. The world is built once per module and each example runs
in a savepoint that is rolled back, so every example meets the same world: a project `hill` with a run
`r1` (turns, metrics, a checkpoint, artifacts) and one submission in each status a lifecycle action
starts from, plus a project `other` that the token and the session may not touch. Three cases in four
take their path parameters (and a few query and body fields) from those real objects, so they reach
past the 404s; each item also asserts that, with valid credentials, some answers were neither 401 nor
404. Positive and negative cases are mixed. A 503 passes only where the operation documents it.

`SMRWEB_FUZZ_EXAMPLES` bounds the examples per operation and auth mode (default 12 inside `make test`;
`make fuzz` runs 300). Generation is derandomized (the same cases every run) unless `SMRWEB_FUZZ_SEED`
names a seed. Nothing is written to a Hypothesis example database.
"""

from __future__ import annotations

import io
import json
import os
import traceback
from collections import Counter

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import Client, override_settings
from django.utils.crypto import get_random_string
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Role, Run, Submission, SubmissionStatus
from smrweb.tracking.services import launches
from tests.factories import UserFactory, admin_project

EXAMPLES = int(os.environ.get("SMRWEB_FUZZ_EXAMPLES", "12"))
SEED = os.environ.get("SMRWEB_FUZZ_SEED")


def no_server_error_but_a_documented_503(ctx, response, case):
    """`not_a_server_error`, except a 503 the operation documents (no worker answered a preflight): that is
    the answer the schema promises, and the other checks still hold it to the schema's shape."""
    if response.status_code == 503 and "503" in case.operation.definition.raw.get("responses", {}):
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    no_server_error_but_a_documented_503,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
AUTH_MODES = ["token", "session", "anonymous"]

# A bug found by the fuzzing and not fixed yet: (operation, auth mode) -> (status, why). That answer is
# tolerated there only (pin it with a strict xfail test); every other answer is still checked. Empty now.
KNOWN_BUGS: dict[tuple[str, str], tuple[int, str]] = {}

APP = get_wsgi_application()
PREFLIGHT_ID = "f" * 32  # a preflight of `generic` whose report is stored (see `world`)
SCHEMA = schemathesis.openapi.from_wsgi("/api/schema/", APP)
OPERATIONS = {op.label: op for op in (result.ok() for result in SCHEMA.get_all_operations())}


# --- the world the cases meet ---------------------------------------------------------------------


# The status each lifecycle action moves a submission from, and the action (the path's last segment).
START_OF = {
    SubmissionStatus.CANDIDATE: "verify",
    SubmissionStatus.VERIFIED: "approve",
    SubmissionStatus.APPROVED: "uploaded",
    SubmissionStatus.UPLOADED: "arena-result",
}


def _events(project, run: str, events: list[dict]) -> None:
    services.ingest_events(project, run, parse_events(json.dumps(events).encode()))


@pytest.fixture(scope="module")
def world_artifacts(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-artifacts")


def _artifact_storage(location) -> dict:
    return {
        **django_settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location), "base_url": None},
        },
    }


@pytest.fixture
def artifact_root(settings, world_artifacts):
    """Overrides the conftest's per-test directory: the world's artifacts are stored once per module."""
    settings.STORAGES = _artifact_storage(world_artifacts)
    return world_artifacts


@pytest.fixture(scope="module")
def world_rows(django_db_setup, django_db_blocker, world_artifacts):
    """The world, built once for the module inside a transaction that is rolled back after it (the
    pattern of Django's TestCase.setUpTestData): each test runs in a savepoint inside it (`db`)."""
    with (
        django_db_blocker.unblock(),
        override_settings(
            STORAGES=_artifact_storage(world_artifacts),
            PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        ),
        transaction.atomic(),
    ):
        yield _build_world()
        transaction.set_rollback(True)


@pytest.fixture
def world(world_rows, db, redis_server, monkeypatch):
    """Real objects for path parameters, and credentials for each auth mode."""
    from smrweb import tasks

    # No worker runs here: a queued preflight is dropped, and the one the pools name was run in-process.
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)
    tasks.preflight_scenario("generic", request_id=PREFLIGHT_ID)
    return world_rows


def _build_world() -> dict:
    alice = UserFactory(
        username="alice", is_staff=True
    )  # admin of `hill`; staff, so she may create scenarios
    bob = UserFactory(username="bob")
    carol = UserFactory(username="carol")
    hill = admin_project("hill", name="Hill climb", by=alice)
    services.add_member(hill, bob, role=Role.REVIEWER)
    admin_project("other", by=carol)
    token = services.create_api_token(hill, name="fuzz")[1]
    hill.rollback_webhook_url = "http://127.0.0.1:9/rollback"  # else every rollback is refused (409)
    hill.save()

    _events(
        hill,
        "r1",
        [
            {"type": "state", "id": "s1", "state": "running"},
            {
                "type": "agent.turn",
                "id": "t0",
                "turn": 0,
                "model": "m",
                "tokens_in": 10,
                "tokens_out": 5,
                "cost_usd": 0.01,
                "tool_calls": ["read"],
            },
            {
                "type": "agent.turn",
                "id": "t1",
                "turn": 1,
                "actor": "child",
                "parent_actor": "driver",
                "tokens_in": 3,
                "tokens_out": 1,
                "cost_usd": 0.002,
            },
            *(
                {"type": "metric", "id": f"m{i}", "key": "loss", "value": 1 / (i + 1), "step": i}
                for i in range(20)
            ),
            {"type": "message", "id": "msg1", "body": "hello"},
            {"type": "checkpoint", "id": "ck1", "label": "first", "commit": "abc123"},
        ],
    )
    # One submission in each status a lifecycle action starts from, so each action can succeed.
    submissions, artifacts = {}, []
    for n, status in enumerate(START_OF):
        artifact, _ = services.store_artifact(
            hill, "r1", path=f"submission/opt{n}.py", content=io.BytesIO(f"print({n})".encode())
        )
        _events(
            hill,
            "r1",
            [
                {
                    "type": "score",
                    "id": f"score{n}",
                    "score": 0.5 + n / 10,
                    "artifact": artifact.blob.sha256,
                    "commit": "abc123",
                }
            ],
        )
        sub = Submission.objects.filter(project=hill).order_by("-id").first()
        Submission.objects.filter(pk=sub.pk).update(status=status)
        submissions[status] = sub.pk
        artifacts.append(artifact.pk)

    # What people write: a tag whose key the `key` pool names, a note, alice's comments (a run's and a
    # submission's), so edits and deletes can succeed.
    run = Run.objects.get(project=hill, external_id="r1")
    services.set_tag(run, key="generic", value="fuzz", by=alice)
    services.save_note(run, by=alice, body="fuzz note")
    comments = [
        services.add_comment(run=run, by=alice, body="fuzz comment"),
        services.add_comment(
            submission=Submission.objects.get(pk=submissions[SubmissionStatus.VERIFIED]), by=alice, body="x"
        ),
    ]
    rules = [
        services.create_alert_rule(
            hill, by=alice, trigger="run.failed", channel="email", target="a@example.com"
        ),
        services.create_alert_rule(hill, by=alice, trigger="run.loop", channel="inbox", recipient="bob"),
    ]

    view = services.save_view(hill, by=alice, name="fuzz view", query="col=param%3Alr", shared=True)

    launch, _ = launches.request_launch(
        hill, by=bob, kickoff="fuzz: start the next run", idempotency_key="fuzz-launch-1"
    )

    browser = Client()
    browser.force_login(alice)
    csrf = get_random_string(32)
    return {
        "alice": alice,
        "token": token,
        "session": {"sessionid": browser.cookies["sessionid"].value, "csrftoken": csrf},
        "csrf": csrf,
        "pools": {
            "slug": ["hill"] * 5 + ["other"],  # mostly the credentials' own project
            "run_id": ["r1"],
            "submission_id": list(submissions.values()),
            "artifact_id": artifacts,
            "key": ["generic"],
            "request_id": [PREFLIGHT_ID],
            "rule_id": [rule.pk for rule in rules],
            "launch_id": [launch.pk],
            "comment_id": [comment.pk for comment in comments],
            "view_id": [view.pk],
        },
        "submission_for": {action: [submissions[status]] for status, action in START_OF.items()},
        "query": {"key": ["loss"]},
        "body": {"submission": list(submissions.values()), "checkpoint": ["ck1"], "scenario": ["generic"]},
    }


@pytest.fixture
def in_process_requests():
    """Requests reach the app inside the test's transaction: like Django's test client, do not let the
    request signals close the test's connection; keep each request's unhandled exception for the report."""
    errors: list[str] = []

    def keep(sender, request=None, **kwargs):
        errors.append(traceback.format_exc())

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    signals.got_request_exception.connect(keep)
    yield errors
    signals.got_request_exception.disconnect(keep)
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


# --- the fuzzing ----------------------------------------------------------------------------------


def _use_real_objects(case, draw, world) -> None:
    """Replace generated path parameters (and a few query and body fields) with real objects: for a
    lifecycle action, mostly the submission whose status the action starts from."""
    action = case.operation.path.rsplit("/", 1)[-1]
    action = "approve" if action == "reject" else action
    for name in list(case.path_parameters or {}):
        if name == "submission_id" and action in world["submission_for"] and draw(st.integers(0, 3)):
            case.path_parameters[name] = draw(st.sampled_from(world["submission_for"][action]))
        elif name in world["pools"]:
            case.path_parameters[name] = draw(st.sampled_from(world["pools"][name]))
    if "comment_id" in (case.path_parameters or {}) and draw(st.integers(0, 3)):
        # Mostly a comment under its own subject (the run's, or the verified submission's): drawn apart,
        # comment and subject missed each other in every case of a run (all 404) once the draws moved.
        on_submission = "/submissions/" in case.operation.path
        case.path_parameters["comment_id"] = world["pools"]["comment_id"][1 if on_submission else 0]
        if on_submission:
            case.path_parameters["submission_id"] = world["submission_for"]["approve"][0]
    for name in list(case.query or {}):
        if name in world["query"] and draw(st.booleans()):
            case.query[name] = draw(st.sampled_from(world["query"][name]))
    if isinstance(case.body, dict):
        for name in list(case.body):
            if name in world["body"] and draw(st.booleans()):
                case.body[name] = draw(st.sampled_from(world["body"][name]))


def _credentials(case, mode: str, world) -> tuple[dict, dict]:
    """Headers and cookies to send on top of the case's. Schemathesis generates (invalid) values for the
    declared security schemes; the anonymous mode keeps them, the others replace them with valid ones."""
    if mode == "token":
        return {"Authorization": f"Bearer {world['token']}"}, {}
    if mode == "session":
        if case.headers:
            case.headers.pop("Authorization", None)  # a bearer header would be tried first and refused
        return {"X-CSRFToken": world["csrf"]}, dict(world["session"])
    return {}, {}


def _settings():
    return settings(
        max_examples=EXAMPLES,
        database=None,
        deadline=None,
        derandomize=SEED is None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        print_blob=SEED is not None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.parametrize("mode", AUTH_MODES)
@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_operation_conforms_to_the_schema(label, mode, world, in_process_requests):
    operation = OPERATIONS[label]
    strategy = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    statuses = Counter()
    known_bug = KNOWN_BUGS.get((label, mode))

    @_settings()
    @given(case=strategy, data=st.data())
    def fuzz(case, data):
        if data.draw(st.integers(0, 3), label="real objects") > 0:  # three times in four
            _use_real_objects(case, data.draw, world)
        headers, cookies = _credentials(case, mode, world)
        in_process_requests.clear()
        with transaction.atomic():
            try:
                response = case.call(app=APP, headers=headers, cookies=cookies)
                statuses[response.status_code] += 1
                if known_bug is None or response.status_code != known_bug[0]:
                    case.validate_response(
                        response, checks=CHECKS, headers=headers, transport_kwargs={"app": APP}
                    )
            except Exception as exc:
                for tb in in_process_requests:
                    exc.add_note(f"\nThe server raised:\n{tb}")
                raise
            finally:
                transaction.set_rollback(True)

    if SEED is not None:
        fuzz = seed(int(SEED))(fuzz)
    fuzz()
    print(f"{label} [{mode}]: {dict(sorted(statuses.items()))}")
    if mode != "anonymous":
        # With valid credentials and real objects, some cases get past authentication and lookups.
        assert set(statuses) - {401, 404}, f"every answer was 401 or 404: {dict(statuses)}"


# --- regressions: the minimal input of each finding ---------------------------------------------------


@pytest.fixture
def documented(db) -> dict:
    """The responses each operation documents, by label."""
    return {label: set(op.definition.raw["responses"]) for label, op in OPERATIONS.items()}


def test_every_authenticated_operation_documents_its_error_answers(documented):
    # Found: the generic views (runs, turns, submissions, scenarios) documented 200/201 only, and answered
    # e.g. `GET /api/v1/projects/nope/runs` without credentials with an undocumented 401.
    for label, op in OPERATIONS.items():
        if op.definition.raw.get("security") == [] or not label.split()[1].startswith("/api/v1/"):
            continue
        if label in ("GET /api/v1/health", "GET /api/v1/bundle-key"):  # public: no credentials, no project
            continue
        assert {"400", "401", "403", "404"} <= documented[label], label


@pytest.mark.parametrize("action", ["verify", "approve", "reject", "uploaded", "arena-result"])
def test_an_illegal_move_is_a_documented_409(action, documented, world):
    # Found: `POST …/submissions/{candidate}/uploaded` answered 409 illegal_transition, undocumented.
    label = f"POST /api/v1/projects/{{slug}}/submissions/{{submission_id}}/{action}"
    assert "409" in documented[label]
    wrong = world["submission_for"]["uploaded" if action != "uploaded" else "verify"][0]
    client = Client()
    client.force_login(world["alice"])
    answer = client.post(
        f"/api/v1/projects/hill/submissions/{wrong}/{action}",
        {"rank": 1} if action == "arena-result" else {},
        content_type="application/json",
    )
    assert answer.status_code == 409 and answer.json()["code"] == "illegal_transition"


def test_a_push_project_has_an_empty_smr_project_id(world):
    # Found: `GET /api/v1/projects/` left out `smr_project_id` (required in the schema) for push projects.
    client = Client()
    client.force_login(world["alice"])
    assert client.get("/api/v1/projects/hill/").json()["smr_project_id"] == ""
    assert client.get("/api/v1/projects/").json()[0]["smr_project_id"] == ""


@pytest.mark.parametrize("body", [{}, {"submission": "<candidate>", "checkpoint": "ck1"}])
def test_a_rollback_needs_exactly_one_target_as_a_field_error(body, world, documented):
    # Found: `{"submission": 1, "checkpoint": "ck1"}` (and `{}`) answered 409 rollback_refused, which is
    # for a conflict with the run's state; a malformed request is a 400 that names the field.
    if "submission" in body:
        body = {**body, "submission": world["submission_for"]["verify"][0]}
    client = Client()
    client.force_login(world["alice"])
    answer = client.post("/api/v1/projects/hill/runs/r1/rollback", body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid" and answer.json()["errors"][0]["field"] == "submission"
    assert "409" in documented["POST /api/v1/projects/{slug}/runs/{run_id}/rollback"]  # the real conflicts


def test_preflight_without_a_worker_is_the_documented_503(world, documented, monkeypatch):
    # Not a bug: checks that the one 5xx the fuzzing accepts is documented and shaped like every error.
    from smrweb import tasks

    assert "503" in documented["GET /api/v1/scenarios/{key}/preflight/{request_id}"]
    asked = Client().post(
        "/api/v1/scenarios/generic/preflight", HTTP_AUTHORIZATION=f"Bearer {world['token']}"
    )
    assert asked.status_code == 202
    monkeypatch.setattr(tasks, "PREFLIGHT_TIMEOUT", 0.0)  # nobody took it before its message expired
    answer = Client().get(asked.json()["poll"], HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    assert answer.status_code == 503 and answer["Retry-After"]
    assert answer.json()["code"] == "no_worker"


# Every operation that reads a body with DRF's parsers (the events endpoint reads its bytes itself).
BODY_OPERATIONS = [
    label
    for label, op in OPERATIONS.items()
    if "requestBody" in op.definition.raw and not label.endswith("/events")
]


@pytest.mark.parametrize("label", BODY_OPERATIONS)
def test_a_body_without_a_content_type_is_a_documented_415(label, world, documented):
    # Found (`make fuzz`): `POST …/submissions/{uploaded}/arena-result` with the body `x` and no Content-Type
    # answered 415 unsupported_media_type, which no operation documented.
    assert "415" in documented[label]
    method, path = label.split(" ", 1)
    path = path.format(
        slug="hill",
        run_id="r1",
        submission_id=world["submission_for"]["approve"][0],
        rule_id=world["pools"]["rule_id"][0],
        comment_id=world["pools"]["comment_id"][1 if "/submissions/" in path else 0],  # its subject's
        key="generic",
    )
    client = Client()
    client.force_login(world["alice"])
    answer = client.generic(method, path, b"x", content_type="")
    assert answer.status_code == 415, answer.content
    assert answer.json()["code"] == "unsupported_media_type"


@pytest.mark.parametrize("action", ["approve", "reject", "arena-result"])
def test_a_review_of_someone_elses_submission_is_refused_before_its_body_is_read(action, world):
    # Found in `make fuzz`'s logs: `{"rank": 0}` to another project's submission answered 400 field errors
    # to a token of `hill` (documented: 403) and to an outsider (documented: 404).
    other = admin_project("elsewhere", by=UserFactory(username="dave"))
    artifact, _ = services.store_artifact(other, "r", path="a.py", content=io.BytesIO(b"x"))
    _events(other, "r", [{"type": "score", "id": "s", "score": 1.0, "artifact": artifact.blob.sha256}])
    url = f"/api/v1/projects/elsewhere/submissions/{Submission.objects.get(project=other).pk}/{action}"
    bad = {"rank": 0, "comment": "x" * 5001}
    token_answer = Client().post(
        url, bad, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {world['token']}"
    )
    assert token_answer.status_code == 403, token_answer.content
    outsider = Client()
    outsider.force_login(world["alice"])
    assert outsider.post(url, bad, content_type="application/json").status_code == 404


def test_a_signed_in_admin_can_push_events(world):
    """Found by this fuzzing: a session's CSRF check read request.POST, which DRF refused with 415."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["alice"])
    client.cookies["csrftoken"] = world["csrf"]
    answer = client.post(
        "/api/v1/projects/hill/runs/r9/events",
        b'[{"type": "metric", "key": "k", "value": 1}]',
        content_type="application/json",
        HTTP_X_CSRFTOKEN=world["csrf"],
    )
    assert answer.status_code == 200, answer.content
