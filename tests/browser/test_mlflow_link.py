"""The "View run" link the MLflow client prints (issue 33, P1-B): `<tracking URI>/#/experiments/<id>/runs/<run
id>` opens the run's page in a browser — the fragment, which never reaches the server, is read by /mlflow/'s
script — and the experiment link the project's page. Before, /mlflow/ was smrweb's 404 page."""

from __future__ import annotations

import re

import pytest

from tests.factories import admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def printed_links(live_server, token, project, monkeypatch, capsys):
    """Log a run with the real MLflow client and return the two links it printed (run, experiment)."""
    import mlflow

    uri = f"{live_server.url}/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("hill")
        with mlflow.start_run(run_name="lr sweep 0.01") as active:
            mlflow.log_metric("loss", 0.5)
    finally:
        mlflow.set_tracking_uri(None)
    out = capsys.readouterr().out
    run = re.search(r"View run lr sweep 0\.01 at: (\S+)", out)
    experiment = re.search(r"View experiment at: (\S+)", out)
    assert run and experiment, out
    assert run[1] == f"{uri}/#/experiments/{project.pk}/runs/{active.info.run_id}"
    return run[1], experiment[1], active.info.run_id


def test_the_clients_view_run_link_opens_the_run_page(page, sign_in, alice, printed_links):
    run_link, experiment_link, run_id = printed_links
    sign_in(alice)
    page.goto(run_link)
    page.wait_for_url(f"**/projects/hill/runs/{run_id}/")
    assert page.locator("h1").first.inner_text().startswith("lr sweep 0.01")
    page.goto(experiment_link)
    page.wait_for_url("**/projects/hill/")


def test_signed_out_the_link_asks_for_a_sign_in_then_opens_the_run(page, alice, printed_links):
    run_link, _, run_id = printed_links
    page.goto(run_link)
    page.wait_for_url(re.compile(r"/login/\?next=/mlflow/runs/"))
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_url(f"**/projects/hill/runs/{run_id}/")


def test_someone_who_may_not_see_the_run_gets_the_not_found_page(page, sign_in, carol, printed_links):
    run_link, _, _ = printed_links
    admin_project("carols", by=carol)
    sign_in(carol)
    page.goto(run_link)
    page.wait_for_url(re.compile(r"/mlflow/runs/"))
    assert page.locator("h1").inner_text() == "Not found"
    page.goto(run_link.split("#")[0])  # no fragment: the projects
    page.wait_for_url(re.compile(r"/$"))
