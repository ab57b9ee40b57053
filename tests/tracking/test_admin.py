"""Every model has a working admin: changelist, and add form or detail page, for a superuser."""

import io
import json

import pytest
from django.contrib import admin

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, project):
    events = [
        {"type": "agent.turn", "turn": 1, "cost_usd": 0.1},
        {"type": "metric", "key": "k", "value": 1},
        {"type": "score", "score": 1.0},
        {"type": "state", "state": "running"},
        {"type": "message", "body": "hi"},
        {"type": "checkpoint", "id": "c1"},
    ]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))
    services.store_artifact(project, "r1", path="a.txt", content=io.BytesIO(b"x"))
    services.create_api_token(project, name="t")
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_every_tracking_model_is_registered_in_the_admin():
    from django.apps import apps

    models = set(apps.get_app_config("tracking").get_models())
    assert models <= set(admin.site._registry), models - set(admin.site._registry)


def test_every_admin_changelist_and_detail_page_renders(admin_client):
    from django.apps import apps

    for model in apps.get_app_config("tracking").get_models():
        meta = model._meta
        changelist = admin_client.get(f"/admin/tracking/{meta.model_name}/")
        assert changelist.status_code == 200, meta.model_name
        row = model.objects.first()
        if row is not None:
            assert (
                admin_client.get(f"/admin/tracking/{meta.model_name}/{row.pk}/change/").status_code == 200
            ), meta.model_name


def test_api_token_secrets_are_never_shown_in_the_admin(admin_client, project):
    token, raw = services.create_api_token(project, name="secret-one")
    page = admin_client.get(f"/admin/tracking/apitoken/{token.pk}/change/").content.decode()
    assert raw not in page and token.token_hash not in page
    assert admin_client.get("/admin/tracking/apitoken/add/").status_code == 403


def test_deleting_a_turn_in_the_admin_keeps_spend_equal_to_the_sum_of_turns(admin_client, project):
    from smrweb.tracking.models import AgentTurn, Run

    turn = AgentTurn.objects.get()
    assert (
        admin_client.post(f"/admin/tracking/agentturn/{turn.pk}/delete/", {"post": "yes"}).status_code == 302
    )
    run = Run.objects.get(external_id="r1")
    assert not AgentTurn.objects.exists()
    assert (run.turn_count, run.cost_usd, run.driver_cost_usd) == (0, 0, 0)


def test_event_derived_run_fields_cannot_be_edited_in_the_admin(admin_client, project):
    from smrweb.tracking.models import Run

    run = Run.objects.get(external_id="r1")
    admin_client.post(
        f"/admin/tracking/run/{run.pk}/change/", {"budget_usd": "5", "state": "done", "turn_count": 99}
    )
    run.refresh_from_db()
    assert run.state == "running" and run.turn_count == 1


def test_deleting_a_run_in_the_admin_cascades_through_its_events(admin_client):
    from smrweb.tracking.models import AgentTurn, Run

    run = Run.objects.get(external_id="r1")
    response = admin_client.post(f"/admin/tracking/run/{run.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Run.objects.filter(pk=run.pk).exists() and not AgentTurn.objects.exists()


@pytest.mark.parametrize("how", ["one", "bulk"])
def test_deleting_a_blob_no_artifact_holds_removes_its_row_and_bytes(admin_client, how):
    import hashlib

    from smrweb.tracking.models import ArtifactBlob

    data = b"left behind by a deleted run"
    blob, _ = services.save_blob(hashlib.sha256(data).hexdigest(), len(data), io.BytesIO(data))
    storage = services.artifact_storage()
    assert storage.exists(blob.storage_name)
    if how == "one":
        response = admin_client.post(f"/admin/tracking/artifactblob/{blob.pk}/delete/", {"post": "yes"})
    else:
        response = admin_client.post(
            "/admin/tracking/artifactblob/",
            {"action": "delete_selected", "_selected_action": [blob.pk], "post": "yes"},
        )
    assert response.status_code == 302
    assert not ArtifactBlob.objects.filter(pk=blob.pk).exists() and not storage.exists(blob.storage_name)
    assert ArtifactBlob.objects.count() == 1  # the artifact's own blob stays


def test_one_read_only_admin_base_and_what_it_covers():
    """Issue 35: one read-only base (there were three under three names, and three more classes wrote
    the same permission methods again). A read-only admin is a ReadOnlyAdmin; `deletable` says which
    of them may delete."""
    from smrweb.tracking import admin as tracking_admin

    own = [
        cls.__name__
        for cls in vars(tracking_admin).values()
        if isinstance(cls, type)
        and issubclass(cls, admin.ModelAdmin)
        and "has_change_permission" in vars(cls)
    ]
    assert own == ["ReadOnlyAdmin"]
    registry = {model.__name__: ma for model, ma in admin.site._registry.items()}
    read_only = {name for name, ma in registry.items() if isinstance(ma, tracking_admin.ReadOnlyAdmin)}
    deletable = {name for name in read_only if registry[name].deletable}
    assert deletable == {
        "AgentTurn", "Artifact", "ArtifactBlob", "BlobSummary", "Checkpoint", "Experiment", "MetricPoint",
        "MetricRollup",
        "ProjectInvitation", "RuntimeMessage", "StateChange", "Submission", "TurnBody", "TurnRollup",
        "ProjectFigures", "RunDaySpend",  # derived (issue 36): deleted with their project or run
        "RunModelSpend",  # derived (issue 37): deleted with its run
    }  # fmt: skip
    assert read_only - deletable == {
        "AlertRule", "AuditEvent", "Comment", "LoopFinding", "Notification", "Rollback", "RunControl",
        "RunLaunch", "RunNote", "RunParam", "RunSnooze", "RunTag", "SubmissionTransition",
        "RunLogLine", "RunLogBatch",  # a run's log (issue 37): its seq and counts are the service's
        "SavedView",  # a person's view of the runs table (issue 38): saved and deleted on the page or the API
        "ShareLink",  # a read-only share link (issue 39): created and revoked on the pages, audited
        "GuardEpisode",  # when a spend guard acted (issue 38): its unique key is the once-per-episode rule
    }  # fmt: skip
