"""The scenario page: who may see it, what it shows, and the preflight report swapped in by htmx."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.models import Scenario
from tests.conftest import wait_for
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
def local_preflight(monkeypatch, redis_server):
    """The preflight task run in-process when it is queued, instead of on a worker (the worker path has
    its own test below); the request and its report still go through the real Redis."""
    monkeypatch.setattr(
        tasks.preflight_scenario, "apply_async", lambda args, **kw: tasks.preflight_scenario(*args)
    )


def preflight(client, url: str = PREFLIGHT) -> str:
    """Press the button as htmx does: the POST answers a fragment that polls; follow the poll once."""
    asked = client.post(url, headers=HTMX)
    assert asked.status_code == 200, asked.content[:300]
    fragment = asked.content.decode()
    assert 'aria-busy="true"' in fragment and "Queued for a worker" in fragment
    poll = re.search(r'hx-get="([^"]+)" hx-trigger="every 1s"', fragment).group(1)
    return client.get(poll, headers=HTMX).content.decode()


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
    validator = re.search(
        r'<pre class="command" data-command="validator"><code>(.*?)</code></pre>', body
    ).group(1)
    assert json.loads(validator.replace("&quot;", '"')) == arena.validator_command  # the list, as a list
    assert 'data-command="scoring"' not in body and "the arena's result" in body
    assert '<a href="/projects/dogfight/">Dogfight runs</a>' in body
    assert f'hx-post="{PREFLIGHT}"' in body and 'hx-target="#preflight-report"' in body


def test_outsiders_get_404_for_a_teams_scenario_and_staff_see_every_scenario(
    client, alice, carol, other_project
):
    services.create_scenario(key="exec-tests", name="Exec", validator_command=["python3", "{artifact}"])
    admin_project("theirs", scenario=Scenario.objects.get(key="exec-tests"), by=alice)
    client.force_login(carol)  # a member of a project on another scenario only
    assert client.get("/scenarios/exec-tests/").status_code == 404
    assert client.post("/scenarios/exec-tests/preflight", headers=HTMX).status_code == 404
    assert client.get("/scenarios/generic/").status_code == 200  # a shared preset: anyone signed in
    client.force_login(UserFactory(username="root", is_staff=True))
    assert client.get("/scenarios/exec-tests/").status_code == 200
    assert client.get("/scenarios/no-such-scenario/").status_code == 404


def test_the_project_page_links_to_its_scenario(client, alice, arena):
    client.force_login(alice)
    body = client.get("/projects/dogfight/").content.decode()
    assert f'<a href="{PAGE}"><b>Dogfight arena (ONNX policy)</b></a>' in body


def test_htmx_preflight_swaps_in_the_report(client, alice, arena, local_preflight):
    client.force_login(alice)
    body = preflight(client)
    assert 'hx-trigger="every 1s"' not in body  # done: no more polling
    assert body.lstrip().startswith('<section class="card preflight" id="preflight-report"')
    assert "<html" not in body
    assert '<li class="check ok" data-check="validator program">' in body
    if importlib_onnx_missing():
        assert "<b>Not ready:</b> 1 of" in body and "(toolchain python:onnx)" in body
        assert '<li class="check fail" data-check="toolchain python:onnx">' in body
        assert (
            "python package <code>onnx</code> is not installed on this worker (needed by the validator"
            in body
        )
    assert "Run again" in body


def test_a_ready_scenario_says_so(client, alice, local_preflight):
    call_command("load_presets", stdout=io.StringIO())
    admin_project("climb", scenario=Scenario.objects.get(key="optimizer-hill-climb"), by=alice)
    client.force_login(alice)
    body = preflight(client, "/scenarios/optimizer-hill-climb/preflight")
    assert "<b>Ready:</b> all" in body and 'class="check fail"' not in body


def test_details_quote_the_preset_escaped(client, alice, local_preflight):
    scenario = services.create_scenario(key="odd", name="Odd", harness_id="<b>bold</b>")
    admin_project("odd", scenario=scenario, by=alice)
    client.force_login(alice)
    body = preflight(client, "/scenarios/odd/preflight")
    assert "<code>&lt;b&gt;bold&lt;/b&gt;</code>" in body and "<b>bold</b>" not in body


def test_without_javascript_the_post_answers_the_whole_page(client, alice, arena, local_preflight):
    client.force_login(alice)
    response = client.post(PREFLIGHT)
    assert response.status_code == 302 and response["Location"].startswith(f"{PAGE}?preflight=")
    body = client.get(response["Location"]).content.decode()
    assert "<html" in body and 'id="preflight-report"' in body and 'data-check="arena"' in body


def test_no_worker_taking_it_is_said_in_the_fragment(client, alice, arena, monkeypatch, redis_server):
    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", lambda *a, **kw: None)  # nobody takes it
    client.force_login(alice)
    asked = client.post(PREFLIGHT, headers=HTMX)
    assert asked.status_code == 200  # htmx 2 swaps 2xx only
    poll = re.search(r'hx-get="([^"]+)"', asked.content.decode()).group(1)
    assert "Queued for a worker" in client.get(poll, headers=HTMX).content.decode()
    monkeypatch.setattr(tasks, "PREFLIGHT_TIMEOUT", 0.0)
    body = client.get(poll, headers=HTMX).content.decode()
    assert "preflight runs on a worker, and no worker took it within 0 seconds" in body
    assert 'hx-trigger="every 1s"' not in body  # the poll stops


def test_an_unreachable_queue_is_said_in_the_fragment(client, alice, arena, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    client.force_login(alice)
    body = client.post(PREFLIGHT, headers=HTMX).content.decode()
    assert "preflight runs on a worker, and the task queue cannot be reached" in body


def test_a_burst_is_refused_with_429_in_the_fragment(client, alice, arena, local_preflight, settings):
    settings.SMRWEB_PREFLIGHT_RATE = "1/d"  # fixed windows: a minute one can end between the posts
    client.force_login(alice)
    assert client.post(PREFLIGHT, headers=HTMX).status_code == 200
    refused = client.post(PREFLIGHT, headers=HTMX)
    assert refused.status_code == 200 and int(refused["Retry-After"]) > 0  # htmx swaps 2xx only
    assert "you asked too often. Too many attempts." in refused.content.decode()
    plain = client.post(PREFLIGHT)
    assert plain.status_code == 429 and "you asked too often" in plain.content.decode()


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
    asked = client.post("/scenarios/optimizer-hill-climb/preflight", headers=HTMX).content.decode()
    poll = re.search(r'hx-get="([^"]+)"', asked).group(1)

    def reported():
        body = client.get(poll, headers=HTMX).content.decode()
        return body if "Ran on worker" in body else None

    body = wait_for(reported, timeout=60, interval=0.3)
    assert "<b>Ready:</b> all" in body and "Ran on worker <code>" in body


def importlib_onnx_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnx") is None
