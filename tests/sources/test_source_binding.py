"""Red-team finding 1 (confused deputy): a signed-in stranger created an SMR project bound to another team's
SMR project id, and the worker mirrored it — runs, spend, artifact bytes — and stopped its runs, all with the
operator's SMR key. Now creating a project needs staff or `tracking.add_project`, binding it to SMR
`tracking.bind_source`; a user's SMR project must bring its own key (the operator's is never lent to it);
and an SMR project id binds one smrweb project unless staff allow a second."""

from __future__ import annotations

import importlib
import io

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from smrweb import tasks
from smrweb.sources import sync
from smrweb.sources.base import AuthFailed
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.models import Project, Run, SourceHealth, SourceKind
from tests.api.helpers import assert_json_error, session_client
from tests.conftest import wait_for
from tests.factories import UserFactory, grant

OPERATOR_KEY, VICTIM, OTHER = "operator-key", "victim-smr", "other-smr"
PROJECTS = "/api/v1/projects/"


@pytest.fixture
def simulator(start_sim, settings):
    """An SMR backend that knows only the operator's key, configured as the operator's backend."""
    sim = start_sim(api_key=OPERATOR_KEY, project_ids=[VICTIM, OTHER], runs=3, tick=0.1, seed=11, warmup=20)
    settings.SMRWEB_SMR_BACKEND_BASE, settings.SMRWEB_SMR_API_KEY = sim.url, OPERATOR_KEY
    return sim


@pytest.fixture
def victim(simulator, db):
    """The victim team's project, bound by the operator (no key of its own: the operator's is used)."""
    project = services.create_project("victim", source=SourceKind.SMR, smr_project_id=VICTIM)
    assert sync.sync_project(project, owner="test").synced == 3
    return project


@pytest.fixture
def mallory(db):
    return UserFactory(username="mallory")


def test_a_signed_in_stranger_cannot_create_a_project_at_all(mallory, victim):
    # The review's request, verbatim.
    body = assert_json_error(
        session_client(mallory).post(
            PROJECTS, {"slug": "mirror", "source": "smr", "smr_project_id": VICTIM}, format="json"
        ),
        403,
    )
    assert "staff" in body["message"]
    assert_json_error(session_client(mallory).post(PROJECTS, {"slug": "plain"}, format="json"), 403)
    assert list(Project.objects.values_list("slug", flat=True)) == ["victim"]


def test_a_user_who_may_add_projects_still_may_not_bind_one_to_smr(mallory, victim):
    grant(mallory, "add_project")
    body = assert_json_error(
        session_client(mallory).post(
            PROJECTS, {"slug": "mirror", "source": "smr", "smr_project_id": OTHER}, format="json"
        ),
        403,
    )
    assert body["code"] == "not_allowed" and "bind" in body["message"]
    assert session_client(mallory).post(PROJECTS, {"slug": "plain"}, format="json").status_code == 201


def test_a_user_who_may_bind_must_bring_a_key_of_their_own(mallory, victim):
    grant(mallory, "add_project", "bind_source")
    body = assert_json_error(
        session_client(mallory).post(
            PROJECTS, {"slug": "mirror", "source": "smr", "smr_project_id": OTHER}, format="json"
        ),
        400,
    )
    assert [e["field"] for e in body["errors"]] == ["smr_api_key"]
    assert not Project.objects.filter(slug="mirror").exists()


def test_an_smr_project_id_binds_one_smrweb_project_unless_staff_allow_a_second(mallory, victim):
    grant(mallory, "add_project", "bind_source")
    payload = {"slug": "mirror", "source": "smr", "smr_project_id": VICTIM, "smr_api_key": "mine"}
    body = assert_json_error(session_client(mallory).post(PROJECTS, payload, format="json"), 400)
    assert body["errors"][0]["field"] == "smr_project_id" and "'victim'" in body["message"]
    body = assert_json_error(
        session_client(mallory).post(PROJECTS, {**payload, "allow_shared_smr_project": True}, format="json"),
        400,
    )  # not staff: ignored
    staff = UserFactory(username="sam", is_staff=True)
    body = assert_json_error(
        session_client(staff).post(  # the backend does not know the key "mine"
            PROJECTS, {**payload, "allow_shared_smr_project": True}, format="json"
        ),
        400,
    )
    assert [e["field"] for e in body["errors"]] == ["smr_api_key"] and "refused this API key" in body[
        "message"
    ]
    response = session_client(staff).post(
        PROJECTS, {**payload, "allow_shared_smr_project": True, "check_connection": False}, format="json"
    )
    assert response.status_code == 201, response.content
    with pytest.raises(InvalidInput):
        services.create_project("third", source=SourceKind.SMR, smr_project_id=VICTIM)
    services.create_project(
        "third", source=SourceKind.SMR, smr_project_id=VICTIM, allow_shared_smr_project=True
    )


def test_the_command_line_allows_a_second_binding_only_when_asked(victim):
    with pytest.raises(CommandError, match="already bound to smrweb project 'victim'"):
        call_command(
            "create_project", "again", "--source", "smr", "--smr-project-id", VICTIM, stdout=io.StringIO()
        )
    call_command(
        "create_project",
        "again",
        "--source",
        "smr",
        "--smr-project-id",
        VICTIM,
        "--allow-duplicate",
        stdout=io.StringIO(),
    )
    assert Project.objects.get(slug="again").uses_operator_smr_key


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_users_smr_project_is_polled_with_its_own_key_never_the_operators(
    mallory, victim, simulator, celery_worker
):
    """Mallory, allowed to bind, binds the other SMR project with a key of her own that the backend does
    not know: the worker's sync is refused by the backend, nothing is mirrored, and source health says so."""
    grant(mallory, "add_project", "bind_source")
    payload = {
        "slug": "mirror",
        "source": "smr",
        "smr_project_id": OTHER,
        "smr_api_key": "mallorys-own-key",
        "smr_backend_base": simulator.url,
    }
    refused = simulator.stats.unauthorized
    body = assert_json_error(session_client(mallory).post(PROJECTS, payload, format="json"), 400)
    assert body["errors"][0]["field"] == "smr_api_key" and simulator.stats.unauthorized == refused + 1
    assert not Project.objects.filter(slug="mirror").exists()  # asked before saving: nothing half-created
    # Bound without asking (check_connection false), the poller is refused all the same.
    response = session_client(mallory).post(PROJECTS, {**payload, "check_connection": False}, format="json")
    assert response.status_code == 201, response.content
    mirror = Project.objects.get(slug="mirror")
    assert not mirror.uses_operator_smr_key and "api_key_sealed" in mirror.source_settings
    refused = simulator.stats.unauthorized
    tasks.sync_project.delay(mirror.pk)
    health = wait_for(
        lambda: SourceHealth.objects.filter(project=mirror, consecutive_failures__gte=1).first()
    )
    assert health.last_error_kind == "auth"
    assert simulator.stats.unauthorized > refused  # the backend saw her key, and refused it
    assert not Run.objects.filter(project=mirror).exists()
    assert Run.objects.filter(project=victim).count() == 3  # the operator's own binding still syncs


def test_a_project_a_user_bound_before_this_fix_stops_syncing(mallory, victim, simulator):
    """A mirror left from before (bound by a user, no key of its own): the operator's key is not used."""
    mirror = Project.objects.create(
        slug="mirror",
        name="mirror",
        scenario=victim.scenario,
        source=SourceKind.SMR,
        source_settings={"smr_project_id": OTHER},
    )
    with pytest.raises(AuthFailed, match="no SMR API key of its own"):
        connector_for(mirror)
    before = dict(simulator.stats.requests)
    report = sync.sync_project(mirror, owner="test")
    assert report.synced == 0 and not Run.objects.filter(project=mirror).exists()
    assert dict(simulator.stats.requests) == before  # not one request went out
    assert SourceHealth.objects.get(project=mirror).last_error_kind == "auth"


def test_the_migration_lends_the_operators_key_only_to_projects_the_operator_or_staff_bound(db, mallory):
    migration = importlib.import_module("smrweb.tracking.migrations.0008_source_binding_and_shared_scenarios")
    staff = UserFactory(username="sam", is_staff=True)
    made = {}
    for slug, by in (("by-cli", None), ("by-staff", staff), ("by-user", mallory)):
        made[slug] = Project.objects.create(
            slug=slug,
            name=slug,
            scenario=services.generic_scenario(),
            source=SourceKind.SMR,
            source_settings={"smr_project_id": slug},
        )
        services.record_audit(by, "project.created", made[slug], project=made[slug])
    migration.forwards(apps, None)
    flags = {slug: Project.objects.get(slug=slug).uses_operator_smr_key for slug in made}
    assert flags == {"by-cli": True, "by-staff": True, "by-user": False}


def test_a_user_attaches_only_shared_scenarios(mallory):
    """Finding 4's first half: a scenario staff made for one team (its validator runs the artifact) cannot
    be attached to a stranger's project; the shared presets can."""
    grant(mallory, "add_project")
    services.create_scenario(key="exec-tests", name="Exec", validator_command=["python3", "{artifact}"])
    body = assert_json_error(
        session_client(mallory).post(PROJECTS, {"slug": "pwn", "scenario": "exec-tests"}, format="json"), 400
    )
    assert (
        body["errors"][0]["field"] == "scenario"
        and body["message"] == "Object with key=exec-tests does not exist."
    )
    with pytest.raises(InvalidInput):
        services.create_project("pwn", scenario=services.create_scenario(key="other", name="o"), by=mallory)
    call_command("load_presets", stdout=io.StringIO())
    assert (
        session_client(mallory)
        .post(PROJECTS, {"slug": "ok", "scenario": "optimizer-hill-climb"}, format="json")
        .status_code
        == 201
    )
    staff = UserFactory(username="sam", is_staff=True)
    assert (
        session_client(staff)
        .post(PROJECTS, {"slug": "team", "scenario": "exec-tests"}, format="json")
        .status_code
        == 201
    )


def test_the_service_is_the_one_home_of_the_rule(mallory, db):
    with pytest.raises(NotAllowed):
        services.create_project("x", by=mallory)
    grant(mallory, "add_project")
    with pytest.raises(NotAllowed):
        services.create_project(
            "x", source=SourceKind.GIT, git_repo_path="/tmp/r", git_branch="main", by=mallory
        )
    assert services.create_project("x", by=mallory).slug == "x"


def test_a_source_error_holding_nul_is_recorded(project):
    """git's stderr carried a NUL (the pack protocol's) into source health: PostgreSQL refused the row."""
    services.create_project("polled", source=SourceKind.SMR, smr_project_id="nul")
    polled = Project.objects.get(slug="polled")
    services.claim_source_lease(polled, owner="t", seconds=5)
    services.record_source_failure(polled, kind="git", message="fatal: bad pack header\x00\x01", retry_in=1)
    assert SourceHealth.objects.get(project=polled).last_error == "fatal: bad pack header\ufffd\x01"
