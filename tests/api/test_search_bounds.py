"""Every user-supplied search outside MLflow, under the review's patterns (2026-11-28, N1): the runs
`?q=` of the API and of the project page is a bounded substring (core/patterns.py) whose `%`, `_` and
regex metacharacters are literal; artifact paths written by any way in keep to `/` (N10)."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime

import pytest

from smrweb.core.patterns import MAX_SEARCH_CHARS
from smrweb.sources.base import ArtifactRef, Malformed
from smrweb.sources.sync import SyncReport, _new_artifacts
from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import Artifact, Run
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db
CEILING = 5
RUNS = "/api/v1/projects/hill/runs"


@pytest.fixture
def long_runs(project, alice):
    """Runs with long text in every field `?q=` reads: a 200-character name, a 5,000-character tag and a
    long failure detail."""
    for run_id, detail in (("long", "a" * 2000), ("pct", "done 50% of it"), ("meta", "a.b*c+?[x](y)")):
        services.ingest_events(
            project,
            run_id,
            ev.parse_events(
                json.dumps(
                    [
                        {
                            "type": "state",
                            "id": "s",
                            "state": "failed",
                            "failure": {"family": "x", "detail": detail},
                        }
                    ]
                )
            ),
        )
    services.update_run_labels(Run.objects.get(external_id="long"), display_name="a" * 200, by=alice)
    services.set_tag(Run.objects.get(external_id="long"), key="t", value="a" * 5000, by=alice)
    return project


def ids(client, url: str = RUNS, **params) -> set[str]:
    start = time.monotonic()
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    assert time.monotonic() - start < CEILING
    return {r["external_id"] for r in response.json()["results"]}


@pytest.mark.parametrize("q", ["%a%a%a%a%a%b", "%a%a%a%b", "_" * 40 + "b", ".*.*.*.*b", "(a+)+b"])
def test_the_reviews_patterns_are_plain_text_in_the_runs_search(api, long_runs, q):
    assert ids(api, q=q) == set()


def test_the_runs_search_matches_wildcards_and_metacharacters_literally(api, long_runs):
    assert ids(api, q="50%") == {"pct"}
    assert ids(api, q="5_%") == set()
    assert ids(api, q="b*c+?[x](y") == {"meta"}
    assert ids(api, q="A" * 200) == {"long"}


def test_a_search_over_the_limit_is_a_400_naming_q(api, long_runs):
    body = assert_json_error(api.get(RUNS, {"q": "a" * (MAX_SEARCH_CHARS + 1)}), 400)
    assert body["errors"][0]["field"] == "q"


def test_the_project_pages_search_box_is_bounded_for_a_viewer(victor, long_runs):
    client = session_client(victor)
    for q in ("%a%a%a%a%a%b", "_" * 40 + "b", "a" * 200, "a" * 201):
        start = time.monotonic()
        response = client.get("/projects/hill/", {"q": q})
        assert response.status_code == 200
        assert time.monotonic() - start < CEILING
    page = client.get("/projects/hill/", {"q": "a" * (MAX_SEARCH_CHARS + 1)}).content.decode()
    assert "data-ignored" in page and "<code>q</code>" in page  # over the limit: named, not searched


def test_an_api_upload_with_a_backslash_in_its_path_is_refused(api, project, artifact_root):
    response = api.post(
        f"{RUNS}/r1/artifacts",
        {"file": io.BytesIO(b"x"), "path": "a\\..\\..\\b"},
        format="multipart",
    )
    body = assert_json_error(response, 400)
    assert body["errors"][0]["field"] == "path" and "backslash" in body["errors"][0]["message"]
    assert not Artifact.objects.exists()


class _NoPulls:
    def pull_artifact(self, ref):
        raise AssertionError("a refused path is not downloaded")


def test_a_synced_artifact_with_a_backslash_is_a_source_error_and_nothing_is_stored(project):
    ref = ArtifactRef("art-1", "out\\..\\..\\evil.py", "0" * 64, 1, "text/plain", "file", datetime.now(UTC))
    new: list[dict] = []
    with pytest.raises(Malformed, match="backslash"):
        _new_artifacts(project, "r1", [ref], connector=_NoPulls(), cursor={}, report=SyncReport(), into=new)
    assert not new and not Artifact.objects.exists()
