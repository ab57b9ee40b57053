"""The tree of attempts page (issue 39): a tab of the project's runs, following the runs table's filters;
each run a link to its page, dead branches dimmed, the path to the best marked; htmx gets the tree alone."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking.models import Run
from tests.tracking.test_tree import ingest, launched, scored

pytestmark = pytest.mark.django_db


@pytest.fixture
def grown(project, bob):
    from smrweb.tracking import services

    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(project, "root", {"type": "state", "id": "st", "state": "running"})
    scored(project, "root", 0.5, by=bob)
    launched(project, bob, "root", "better")
    scored(project, "better", 0.8, by=bob)
    launched(project, bob, "root", "worse")
    scored(project, "worse", 0.2, by=bob)
    ingest(project, "worse", {"type": "state", "id": "f", "state": "failed"})
    return project


def test_the_page_draws_every_run_with_its_facts_and_links(client, victor, grown):
    client.force_login(victor)
    page = client.get("/projects/hill/tree/")
    assert page.status_code == 200
    html = page.content.decode()
    for name in ("root", "better", "worse"):
        assert f'href="{Run.objects.get(external_id=name).get_absolute_url()}"' in html
    assert 'data-run="worse" data-dead="failed"' in html
    assert 'data-run="better" data-best-path' in html and 'data-run="root" data-best-path' in html
    assert "Tree of attempts" in html and 'aria-current="page"' in html


def test_the_filters_narrow_it_and_htmx_gets_the_tree_alone(client, victor, grown):
    client.force_login(victor)
    part = client.get("/projects/hill/tree/?failed=1", HTTP_HX_REQUEST="true").content.decode()
    assert part.lstrip().startswith('<section class="card narrowed" id="tree"')
    assert 'data-run="worse"' in part and 'data-run="better"' not in part
    assert 'data-run="root" data-best-path' not in part and 'class="tree-node context' in part
    assert "1 of 3 runs match the" in part


def test_the_project_page_has_the_tab_with_its_filters(client, victor, grown):
    client.force_login(victor)
    html = client.get("/projects/hill/?state=failed").content.decode()
    assert 'href="/projects/hill/tree/?state=failed"' in html


def test_the_page_reads_as_many_queries_for_3_runs_as_for_12(client, victor, grown, bob):
    """Every node drawn from what the tree read: no query per run (its URL, its state badge)."""
    client.force_login(victor)
    client.get("/projects/hill/tree/")  # the session's first page (it records the person's clock)
    counts = []
    for more in (0, 9):
        for i in range(more):
            launched(grown, bob, "better" if i % 2 else "root", f"more-{i}")
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/projects/hill/tree/?q=e").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


def test_the_page_reads_as_many_queries_at_2000_runs_and_draws_every_one(client, victor, grown):
    """Readable at 2,000 runs: the same queries as at 3, every run drawn (large subtrees start closed)."""
    from tests.tracking.test_tree import _more_launched

    client.force_login(victor)
    client.get("/projects/hill/tree/")
    counts = []
    for more in (0, 1997):
        _more_launched(grown, more)
        with CaptureQueriesContext(connection) as queries:
            answer = client.get("/projects/hill/tree/")
        assert answer.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    page = answer.content.decode()
    assert Run.objects.filter(project=grown).count() == 2000
    assert all(f"/runs/x{i}/" in page for i in (0, 999, 1996))
    assert page.count(' data-run="') == 2000
