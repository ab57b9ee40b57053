"""The project page's runs table as people shape it (issue 38 item 3): chosen columns — params, tags,
metrics, spend parts — shown, sorted on the server and moved by links; a grouping; saved views, private or
shared, opened by `?view=`, saved from the page as it is now and deleted by whoever may."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.core import localcache
from smrweb.tracking import services
from smrweb.tracking.models import Run, SavedView
from tests.factories import push

pytestmark = pytest.mark.django_db

PAGE = "/projects/hill/"


def body(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def table_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-run="([^"]+)"', html)


def cells(html: str, spec: str) -> list[str]:
    return [c.strip() for c in re.findall(rf'data-col="{re.escape(spec)}"[^>]*>([^<]*)</td>', html)]


def seed(project, alice, n: int = 4):
    for i in range(n):
        events = [
            {"id": f"t{i}", "type": "agent.turn", "turn": 0, "tokens_in": 1000 * (i + 1), "tokens_out": 1}
        ]
        events[0].update(cost_usd=0.25 * (i + 1), actor="w", parent_actor="driver")
        events += [
            {"type": "metric", "key": "val/loss", "step": s, "value": (i + 1) / (s + 1)} for s in range(3)
        ]
        push(project, f"r{i}", *events, {"id": f"s{i}", "type": "score", "score": i / 10})
        run = Run.objects.get(project=project, external_id=f"r{i}")
        services.log_params(run, [("lr", ["0.1", "0.03", "10", "9"][i % 4])], by=alice)
        services.set_tag(run, key="model", value=["sonnet", "gpt-5"][i % 2], by=alice)


def test_chosen_columns_show_each_runs_values(client_alice, alice, project):
    seed(project, alice)
    html = body(
        client_alice.get(PAGE, {"col": ["param:lr", "metric:val/loss:min", "spend:child_usd"], "sort": "run"})
    )
    assert table_ids(html) == ["r0", "r1", "r2", "r3"]
    assert cells(html, "param:lr") == ["0.1", "0.03", "10", "9"]
    assert cells(html, "metric:val/loss:min") == ["0.3333", "0.6667", "1", "1.333"]
    assert cells(html, "spend:child_usd") == ["$0.25", "$0.50", "$0.75", "$1.00"]
    heads = re.findall(r'data-sort-key="col:([^"]+)"><a href="([^"]+)"', html)
    assert [spec for spec, _ in heads] == ["param:lr", "metric:val/loss:min", "spend:child_usd"]
    # a header sorts by its column: a param's numbers in number order
    link = dict(heads)["param:lr"].replace("&amp;", "&")
    assert parse_qs(urlsplit(link).query)["sort"] == ["col:param:lr"]
    html = body(client_alice.get(link))
    assert cells(html, "param:lr") == ["0.03", "0.1", "9", "10"]
    assert 'aria-sort="ascending" data-sort-key="col:param:lr"' in html


def test_the_columns_bar_moves_removes_and_offers_columns(client_alice, alice, project):
    seed(project, alice)
    html = body(
        client_alice.get(f"{PAGE}columns/", {"col": ["param:lr", "tag:model"]}, HTTP_HX_REQUEST="true")
    )
    chips = re.findall(r'data-col-chip="([^"]+)"', html)
    assert chips == ["param:lr", "tag:model"]
    right = re.search(r'href="\?([^"]+)"[^>]*\s+hx-swap[^>]*title="Move lr right"', html).group(1)
    assert parse_qs(right.replace("&amp;", "&"))["col"] == ["tag:model", "param:lr"]
    remove = re.search(r'href="\?([^"]*)"[^>]*\s+hx-swap[^>]*title="Remove the column model"', html).group(1)
    assert parse_qs(remove.replace("&amp;", "&"))["col"] == ["param:lr"]
    menu = html[html.index('<select name="col"') : html.index("</select>")]
    offered = re.findall(r'<option value="([^"]+)"', menu)
    assert "metric:val/loss" in offered and "metric:val/loss:max" in offered and "spend:tokens" in offered
    assert "param:lr" not in offered  # already shown
    assert "tag:model" in re.findall(r'<option value="(tag:[^"]+)"', html)  # and as a grouping


def test_grouping_puts_each_arm_together_with_its_label(client_alice, alice, project):
    seed(project, alice)
    html = body(client_alice.get(PAGE, {"group": "tag:model", "sort": "-best"}))
    assert table_ids(html) == ["r3", "r1", "r2", "r0"]  # gpt-5 (best first), then sonnet
    assert re.findall(r"data-arm>([^<]+)<", html) == ["gpt-5", "gpt-5", "sonnet", "sonnet"]
    link = re.search(r'href="([^"]+)" data-arms-compare', html).group(1).replace("&amp;", "&")
    query = parse_qs(urlsplit(link).query)
    assert query["group"] == ["tag:model"] and query["runs"] == ["r3,r1,r2,r0"]


def test_columns_that_do_not_read_are_named_and_ignored(client_alice, alice, project):
    seed(project, alice, n=1)
    html = body(client_alice.get(PAGE, {"col": "wibble:x", "sort": "col:nope", "group": "colour"}))
    assert re.search(r"data-ignored>Ignored <code>col</code>, <code>group</code>, <code>sort</code>", html)
    assert table_ids(html) == ["r0"] and "data-col=" not in html


def test_the_page_reads_its_runs_in_the_same_queries_with_ten_columns(client_alice, alice, project):
    seed(project, alice, n=6)
    ten = ["param:lr", "tag:model", "metric:val/loss", "metric:val/loss:min", "metric:val/loss:max"]
    ten += ["spend:usd", "spend:child_usd", "spend:tokens", "spend:driver_tokens", "spend:failed_calls"]
    client_alice.get(PAGE)  # session and preference rows written once
    cache.clear()  # both renders cold: no kept block or rows (nor this process's copies of the rows)
    localcache.clear()
    with CaptureQueriesContext(connection) as plain:
        body(client_alice.get(PAGE, {"sort": "-best"}))
    cache.clear()
    localcache.clear()
    with CaptureQueriesContext(connection) as wide:
        html = body(client_alice.get(PAGE, {"col": ten, "sort": "-col:metric:val/loss"}))
    assert len(cells(html, "spend:failed_calls")) == 6
    assert len(wide) == len(plain)


def test_a_saved_view_opens_as_its_query_and_says_when_changed(
    client_alice, alice, bob, victor, project, client
):
    seed(project, alice)
    query = "tag=model%3Dsonnet&col=param%3Alr&sort=-col%3Aparam%3Alr"
    view = services.save_view(project, by=bob, name="Sonnet by lr", query=query, shared=True)
    mine = services.save_view(project, by=victor, name="victor's", query="col=tag%3Amodel")
    opened = client_alice.get(PAGE, {"view": view.pk})
    assert opened.status_code == 302 and opened["Location"] == f"{PAGE}?{query}&view={view.pk}"
    html = body(client_alice.get(opened["Location"]))
    assert table_ids(html) == ["r2", "r0"] and cells(html, "param:lr") == ["10", "0.1"]  # as numbers
    assert re.search(rf'class="view-chip active" data-view="{view.pk}"', html)
    assert "data-view-modified" not in html
    assert f'data-view="{mine.pk}"' not in html  # victor's private view is not listed for alice
    changed = body(client_alice.get(f"{PAGE}?{query}&sort=run&view={view.pk}"))
    assert "data-view-modified" in changed
    # another's private view: the page, unnarrowed, with `view` ignored
    html = body(client_alice.get(PAGE, {"view": mine.pk}))
    assert len(table_ids(html)) == 4 and "data-col=" not in html
    client.force_login(victor)
    assert client.get(PAGE, {"view": mine.pk})["Location"] == f"{PAGE}?col=tag%3Amodel&view={mine.pk}"


def test_saving_from_the_page_keeps_the_query_and_replaces_by_name(client_alice, alice, project):
    seed(project, alice, n=2)
    query = "state=running&col=metric%3Aval%2Floss&sort=-col%3Ametric%3Aval%2Floss&page=2"
    answer = client_alice.post(f"{PAGE}views/", {"name": "losses", "query": query, "shared": "1"})
    view = SavedView.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"{PAGE}?view={view.pk}"
    assert (
        view.query == "state=running&col=metric%3Aval%2Floss&sort=-col%3Ametric%3Aval%2Floss" and view.shared
    )
    client_alice.post(f"{PAGE}views/", {"name": "losses", "query": "state=failed"})
    view.refresh_from_db()
    assert SavedView.objects.count() == 1 and view.query == "state=failed" and not view.shared


@pytest.mark.parametrize("query", ["col=nope%3Ax", "sort=colour", "group=colour", "archived=2"])
def test_a_view_that_does_not_read_is_not_saved_and_says_why(client_alice, project, query):
    answer = client_alice.post(f"{PAGE}views/", {"name": "bad", "query": query}, follow=True)
    html = body(answer)
    assert "The view was not saved" in html
    assert not SavedView.objects.exists()


def test_a_viewer_keeps_views_but_may_not_share_them(client, victor, project):
    client.force_login(victor)
    assert client.post(f"{PAGE}views/", {"name": "mine", "query": "", "shared": "1"}).status_code == 403
    assert client.post(f"{PAGE}views/", {"name": "mine", "query": "state=failed"}).status_code == 302
    html = body(client.get(PAGE))
    assert "share with the project" not in html and 'data-view="' in html


def test_deleting_a_view(client_alice, alice, bob, victor, project, client):
    shared = services.save_view(project, by=bob, name="team", query="", shared=True)
    private = services.save_view(project, by=bob, name="bob's", query="state=failed")
    html = body(client_alice.get(PAGE))  # an admin may delete a shared view, not see another's private one
    assert f'/views/{shared.pk}/delete"' in html and f"/views/{private.pk}/delete" not in html
    assert client_alice.post(f"{PAGE}views/{private.pk}/delete").status_code == 404
    assert client_alice.post(f"{PAGE}views/{shared.pk}/delete").status_code == 302
    client.force_login(bob)
    assert client.post(f"{PAGE}views/{private.pk}/delete").status_code == 302
    assert not SavedView.objects.exists()
