"""The scenario page: who may see it, what it shows, and the preflight report swapped in by htmx."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from smrweb.sources import tasks
from smrweb.tracking import scenarios, services
from smrweb.tracking.models import Scenario
from tests.factories import UserFactory, admin_project

PAGE, PREFLIGHT = "/scenarios/onnx-arena-dogfight/", "/scenarios/onnx-arena-dogfight/preflight"
HTMX = {"HX-Request": "true"}


@pytest.fixture
def arena(db, alice):
    """The Dogfight preset, used by alice's project `dogfight`."""
    call_command("load_presets", stdout=io.StringIO())
    scenario = Scenario.objects.get(key="onnx-arena-dogfight")
    admin_project("dogfight", name="Dogfight runs", scenario=scenario, by=alice)
    return scenario


@pytest.fixture
def local_preflight(monkeypatch):
    """Preflight run in-process instead of on a worker (the worker path has its own test below)."""
    def run_here(key, **kwargs):
        return scenarios.preflight(Scenario.objects.get(key=key)).as_dict()

    monkeypatch.setattr(tasks, "preflight_on_worker", run_here)


def test_the_page_requires_login(client, arena):
    response = client.get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_member_sees_the_preset_its_commands_and_projects(client, alice, arena):
    client.force_login(alice)
    response = client.get(PAGE)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Dogfight arena (ONNX policy)" in body
    assert "<code>submission/policy.onnx</code>" in body and "<code>dogfight-elo-v1</code>" in body
    assert "<code>python:onnx</code>" in body
    assert 'href="https://optimizationarena.com/dogfight"' in body
    validator = re.search(r'<pre class="command" data-command="validator"><code>(.*?)</code></pre>', body).group(1)
    assert json.loads(validator.replace("&quot;", '"')) == arena.validator_command  # the list, as a list
    assert 'data-command="scoring"' not in body and "the arena's result" in body
    assert '<a href="/projects/dogfight/">Dogfight runs</a>' in body
    assert f'hx-post="{PREFLIGHT}"' in body and 'hx-target="#preflight-report"' in body


def test_outsiders_get_404_and_superusers_see_every_scenario(client, carol, other_project, arena):
    client.force_login(carol)  # a member of a project on another scenario only
    assert client.get(PAGE).status_code == 404
    assert client.post(PREFLIGHT, headers=HTMX).status_code == 404
    client.force_login(UserFactory(username="root", is_superuser=True))
    assert client.get(PAGE).status_code == 200
    assert client.get("/scenarios/no-such-scenario/").status_code == 404


def test_the_project_page_links_to_its_scenario(client, alice, arena):
    client.force_login(alice)
    body = client.get("/projects/dogfight/").content.decode()
    assert f'<a href="{PAGE}"><b>Dogfight arena (ONNX policy)</b></a>' in body


def test_htmx_preflight_swaps_in_the_report(client, alice, arena, local_preflight):
    client.force_login(alice)
    response = client.post(PREFLIGHT, headers=HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="card preflight" id="preflight-report"')
    assert "<html" not in body
    assert '<li class="check ok" data-check="validator program">' in body
    if importlib_onnx_missing():
        assert "<b>Not ready:</b> 1 of" in body and "(toolchain python:onnx)" in body
        assert '<li class="check fail" data-check="toolchain python:onnx">' in body
        assert "python package <code>onnx</code> is not installed on this worker (needed by the validator" in body
    assert "Run again" in body


def test_a_ready_scenario_says_so(client, alice, local_preflight):
    call_command("load_presets", stdout=io.StringIO())
    admin_project("climb", scenario=Scenario.objects.get(key="optimizer-hill-climb"), by=alice)
    client.force_login(alice)
    body = client.post("/scenarios/optimizer-hill-climb/preflight", headers=HTMX).content.decode()
    assert "<b>Ready:</b> all" in body and 'class="check fail"' not in body


def test_details_quote_the_preset_escaped(client, alice, local_preflight):
    scenario = services.create_scenario(key="odd", name="Odd", harness_id="<b>bold</b>")
    admin_project("odd", scenario=scenario, by=alice)
    client.force_login(alice)
    body = client.post("/scenarios/odd/preflight", headers=HTMX).content.decode()
    assert "<code>&lt;b&gt;bold&lt;/b&gt;</code>" in body and "<b>bold</b>" not in body


def test_without_javascript_the_post_answers_the_whole_page(client, alice, arena, local_preflight):
    client.force_login(alice)
    body = client.post(PREFLIGHT).content.decode()
    assert "<html" in body and 'id="preflight-report"' in body and 'data-check="arena"' in body


def test_no_worker_answering_is_said_in_the_fragment(client, alice, arena, monkeypatch):
    def nobody(key, **kwargs):
        raise tasks.NoWorkerAnswer("no worker answered within 10 seconds")

    monkeypatch.setattr(tasks, "preflight_on_worker", nobody)
    client.force_login(alice)
    response = client.post(PREFLIGHT, headers=HTMX)
    assert response.status_code == 200  # htmx 2 swaps 2xx only
    assert "preflight runs on a worker, and no worker answered within 10 seconds" in response.content.decode()


def test_preflight_is_post_only_and_needs_the_csrf_token_htmx_sends(alice, arena, local_preflight):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get(PAGE).content.decode()
    assert client.get(PREFLIGHT).status_code == 405
    assert client.post(PREFLIGHT, headers=HTMX).status_code == 403
    token = json.loads(re.search(r"<body hx-headers='(.*?)'>", page).group(1))["x-csrftoken"]
    assert client.post(PREFLIGHT, headers={**HTMX, "X-CSRFToken": token}).status_code == 200


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_button_runs_the_preflight_on_a_real_worker(client, alice, celery_worker):
    call_command("load_presets", stdout=io.StringIO())
    admin_project("climb", scenario=Scenario.objects.get(key="optimizer-hill-climb"), by=alice)
    client.force_login(alice)
    body = client.post("/scenarios/optimizer-hill-climb/preflight", headers=HTMX).content.decode()
    assert "<b>Ready:</b> all" in body and "Ran on worker <code>" in body


def importlib_onnx_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnx") is None
