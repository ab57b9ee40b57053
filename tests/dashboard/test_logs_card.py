"""The run page's Logs card: the tail (newest at the bottom), older and newer pages by seq, the level filter
and the search, the state in the query, escaping, the empty state, and a live tail on the page's poll."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from smrweb.dashboard import live
from smrweb.tracking.models import LogLevel, Run, RunLogLine
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
LEVELS = (LogLevel.DEBUG, LogLevel.INFO, LogLevel.INFO, LogLevel.WARNING, LogLevel.ERROR)  # by seq % 5
HX = {"HX-Request": "true"}
ONLY = {**HX, live.ONLY_HEADER: "run-logs"}


def add_lines(
    run: Run,
    n: int,
    *,
    text=lambda seq: f"step {seq} done",
    level=lambda seq: LEVELS[seq % 5],
    chunk: int = 5000,
) -> None:
    """n more lines after the run's last (levels cycle debug, info, info, warning, error unless `level`
    says), with the run's counters kept as the write path keeps them."""
    first = run.log_lines + 1
    for start in range(first, first + n, chunk):
        RunLogLine.objects.bulk_create(
            RunLogLine(
                run=run,
                seq=seq,
                ts=T0 + timedelta(seconds=seq),
                level=level(seq),
                text=text(seq),
                stream="stderr" if seq % 7 == 0 else "",
            )
            for seq in range(start, min(start + chunk, first + n))
        )
    warnings = sum(1 for seq in range(first, first + n) if level(seq) >= LogLevel.WARNING)
    Run.objects.filter(pk=run.pk).update(
        log_lines=F("log_lines") + n, log_warnings=F("log_warnings") + warnings
    )
    run.refresh_from_db()


@pytest.fixture
def frozen():
    # The page's versions carry a 30-second tick (a young live run's timeline ends at the next one): keep it
    # from turning between two requests of a test.
    with time_machine.travel(datetime(2026, 12, 1, 9, 0, 5, tzinfo=UTC), tick=False):
        yield


@pytest.fixture
def run(project, frozen):
    push(project, "r1", {"type": "state", "state": "running"})
    return Run.objects.get(project=project, external_id="r1")


def url(project, query: str = "") -> str:
    return f"/projects/{project.slug}/runs/r1/" + (f"?{query}" if query else "")


def card(html: str) -> str:
    return html.split('id="run-logs"', 1)[1].split("</section>", 1)[0]


def seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<li class="log-line[^"]*"\s+id="log-(\d+)"', html)]


def link(html: str, which: str) -> str | None:
    m = re.search(rf'href="(\?[^"]*)#run-logs"[^>]*data-log-link="{which}"', html)
    return m and m[1].replace("&amp;", "&")


def test_the_tail_shows_the_newest_lines_oldest_first_with_the_runs_counts(client_alice, project, run):
    add_lines(run, 500)
    Run.objects.filter(pk=run.pk).update(log_lines_dropped=1234)
    html = card(client_alice.get(url(project)).content.decode())
    assert seqs(html) == list(range(301, 501))  # 200, the newest at the bottom
    assert "500\n          lines · 200\n          warnings or worse" in html
    assert 'data-log-dropped="1,234"' not in html and "1,234\n        lines were over the run's cap" in html
    assert "newest 200" in html and "(#301–#500), following" in html
    assert link(html, "older") == "?logs_before=301"
    assert link(html, "newer") is None and link(html, "newest") is None
    assert "data-log-follow" in html  # the tail follows on the poll
    line = re.search(r'<li[^>]*id="log-303".*?</li>', html, re.S)[0]
    assert 'class="log-level">warning<' in line and 'title="#303 · 2026-12-01 08:05:03.000 UTC"' in line
    assert ">08:05:03</time>" in line and "stderr" not in line
    assert 'title="stderr">stderr<' in re.search(r'<li[^>]*id="log-308".*?</li>', html, re.S)[0]


def test_times_are_in_the_viewers_clock(client_alice, alice, project, run):
    from smrweb.dashboard.clock import ZONE_COOKIE, set_clock

    add_lines(run, 3)
    set_clock(alice, clock="local", local_zone="Asia/Kolkata")
    client_alice.cookies[ZONE_COOKIE] = "Asia/Kolkata"
    line = re.search(r'<li[^>]*id="log-1".*?</li>', client_alice.get(url(project)).content.decode(), re.S)[0]
    assert ">13:30:01</time>" in line and "2026-12-01 13:30:01.000 Asia/Kolkata" in line


def test_a_line_is_shown_as_text_never_as_markup(client_alice, project, run):
    add_lines(run, 2, text=lambda seq: '<script>alert("x")</script> & <b>bold</b>\n\tindented')
    html = card(client_alice.get(url(project)).content.decode())
    assert "<script>alert" not in html and "<b>bold" not in html
    assert (
        "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;\n\tindented" in html
    )


def test_older_and_newer_pages_go_by_seq_and_keep_the_other_lists_pages(client_alice, project, run):
    add_lines(run, 500)
    older = card(client_alice.get(url(project, "turns_page=2&logs_before=301")).content.decode())
    assert seqs(older) == list(range(101, 301))
    assert link(older, "older") == "?turns_page=2&logs_before=101"
    assert link(older, "newer") == "?turns_page=2&logs_after=300"
    assert link(older, "newest") == "?turns_page=2"
    assert "data-log-follow" not in older and 'data-log-start="bottom"' in older
    oldest = card(client_alice.get(url(project, "logs_before=101")).content.decode())
    assert seqs(oldest) == list(range(1, 101)) and link(oldest, "older") is None
    newer = card(client_alice.get(url(project, "logs_after=300")).content.decode())
    assert seqs(newer) == list(range(301, 501)) and 'data-log-start="top"' in newer
    assert link(newer, "newer") is None and link(newer, "newest") == "?"
    assert link(newer, "older") == "?logs_before=301"


def test_the_level_filter_and_the_search_any_case(client_alice, project, run):
    add_lines(
        run, 1000, text=lambda seq: f"Checkpoint {seq} FAILED: workspace missing" if seq % 50 == 0 else "ok"
    )
    warned = card(client_alice.get(url(project, "logs_level=warning")).content.decode())
    shown = seqs(warned)
    assert len(shown) == 200 and all(LEVELS[s % 5] >= LogLevel.WARNING for s in shown) and shown[-1] == 999
    assert '<option value="warning"\n                selected>' in warned
    assert "matching line" in warned
    assert link(warned, "older") == f"?logs_level=warning&logs_before={shown[0]}"
    errors = seqs(card(client_alice.get(url(project, "logs_level=error")).content.decode()))
    assert errors and all(LEVELS[s % 5] == LogLevel.ERROR for s in errors)
    found = card(client_alice.get(url(project, "logs_q=checkpoint+50+failed")).content.decode())
    assert seqs(found) == [50] and 'value="checkpoint 50 failed"' in found
    both = seqs(card(client_alice.get(url(project, "logs_q=failed&logs_level=error")).content.decode()))
    assert both == [s for s in range(50, 1001, 50) if LEVELS[s % 5] == LogLevel.ERROR]
    none = card(client_alice.get(url(project, "logs_q=nothing+like+it")).content.decode())
    assert seqs(none) == [] and "No lines match" in none and "“nothing like it”" in none
    assert ">Clear</a>" in none and ">Clear</a>" not in card(client_alice.get(url(project)).content.decode())


def test_the_filter_form_carries_the_pages_other_lists_and_clear_keeps_them(client_alice, project, run):
    add_lines(run, 10)
    html = card(client_alice.get(url(project, "turns_page=2&logs_q=step&logs_before=5")).content.decode())
    form = re.search(r'<form class="log-filters".*?</form>', html, re.S)[0]
    assert '<input type="hidden" name="turns_page" value="2">' in form
    assert 'name="logs_before"' not in form  # a new filter starts at the tail
    assert 'href="?turns_page=2#run-logs"' in form  # Clear


@pytest.mark.parametrize(
    "query",
    [
        "logs_before=abc",
        "logs_after=-3",
        "logs_before=99999999999999999999999",
        "logs_level=verbose",
        "logs_level=20",
        "logs_q=" + "x" * 5000,
        "logs_q=%25_%5C",
        "logs_before=0",
    ],
)
def test_odd_input_shows_a_page_never_an_error(client_alice, project, run, query):
    add_lines(run, 30)
    response = client_alice.get(url(project, query))
    assert response.status_code == 200
    assert 'id="log-box"' in card(response.content.decode())


def test_a_like_pattern_in_the_search_is_text(client_alice, project, run):
    add_lines(run, 20, text=lambda seq: "100% done" if seq == 7 else "100 of it_x")
    assert seqs(card(client_alice.get(url(project, "logs_q=0%25+d")).content.decode())) == [7]
    assert seqs(card(client_alice.get(url(project, "logs_q=t_x")).content.decode())) == [
        *range(1, 7),
        *range(8, 21),
    ]
    assert seqs(card(client_alice.get(url(project, "logs_q=0_o")).content.decode())) == []


def test_the_card_alone_answers_a_filter_and_the_poll_follows_its_query(client_alice, project, run):
    add_lines(run, 300)
    response = client_alice.get(url(project, "turns_page=1&logs_level=error"), headers=ONLY)
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card logs-card" id="run-logs">')
    assert seqs(card(html)) and all(LEVELS[s % 5] == LogLevel.ERROR for s in seqs(card(html)))
    poll = re.search(r'<div hx-swap-oob="true" id="run-poll"[^>]*>', html)[0]
    assert "logs_level=error" in poll.replace("&amp;", "&")
    assert 'id="turns-card"' in html  # the turns pager's links carry the logs query too


def test_a_run_without_lines_says_how_to_send_them_and_reads_no_lines(client_alice, project, run):
    with CaptureQueriesContext(connection) as queries:
        html = card(client_alice.get(url(project)).content.decode())
    assert not [q for q in queries.captured_queries if "runlogline" in q["sql"].lower()]
    assert "No log lines yet" in html and f"POST /api/v1/projects/{project.slug}/runs/r1/logs" in html
    assert "smrweb log" in html and "Run logs" in html
    assert 'id="log-box"' not in html


def test_outsiders_see_no_logs(client, carol, project, run):
    add_lines(run, 5)
    client.force_login(carol)
    assert client.get(url(project, "logs_level=error"), headers=ONLY).status_code == 404


def poll_headers(client, page_url: str) -> dict:
    page = client.get(page_url).content.decode()
    cards = dict(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', page))
    return {**HX, live.CARDS_HEADER: live.cards_header(cards)}


def test_the_tail_follows_a_live_run_on_the_poll_with_the_new_lines_alone(client_alice, project, run):
    add_lines(run, 250)
    headers = poll_headers(client_alice, url(project))
    assert client_alice.get(url(project), headers=headers).status_code == 204  # no new lines: unchanged
    add_lines(run, 3)
    with CaptureQueriesContext(connection) as queries:
        answer = client_alice.get(url(project), headers=headers).content.decode()
    log_reads = [q for q in queries.captured_queries if "runlogline" in q["sql"].lower()]
    assert len(log_reads) == 1  # one page of lines
    # The new lines come as rows after the line they follow, the oldest three leave, the counts change:
    # not the whole card.
    assert 'id="run-logs"' not in answer
    assert re.search(r'hx-swap-oob="afterend:#log-250">\s*<li class="log-line[^"]*"\s+id="log-251"', answer)
    assert 'id="log-253"' in answer
    for gone in (51, 52, 53):
        assert f'<li id="log-{gone}" hx-swap-oob="delete">' in answer
    assert (
        '<span hx-swap-oob="true" class="muted" id="logs-counts"' in answer
        and "253\n          lines" in answer
    )
    assert 'data-card="run-logs"' in answer


def test_a_page_further_back_keeps_its_lines_when_new_ones_arrive(client_alice, project, run):
    add_lines(run, 500)
    page_url = url(project, "logs_before=301")
    headers = poll_headers(client_alice, page_url)
    add_lines(run, 5)
    answer = client_alice.get(page_url, headers=headers).content.decode()
    assert not re.search(r'id="log-\d+"', answer.replace('id="logs-', ""))  # no line added or removed
    assert "505\n          lines" in answer


def test_a_finished_run_does_not_say_it_follows(client_alice, project, run):
    add_lines(run, 5)
    push(project, "r1", {"type": "state", "state": "done"})
    html = card(client_alice.get(url(project)).content.decode())
    assert "(#1–#5)" in html and "following" not in html


def card_now(user, query: str = "") -> tuple[str, str]:
    """The Logs card's version and render as a poll would compute them (the run read afresh)."""
    from django.contrib.sessions.backends.db import SessionStore
    from django.test import RequestFactory

    from smrweb.dashboard.views.runs import RunPage

    request = RequestFactory().get(f"/projects/hill/runs/r1/{query}")
    request.user, request.session, request.htmx = user, SessionStore(), False
    page = RunPage(request, Run.objects.select_related("project__scenario").get(external_id="r1"))
    card = page.deck(("run-logs",)).cards["run-logs"]
    return card.version, card.render()


LOG_CHANGES = {
    "a new line": lambda run, project: add_lines(run, 1),
    "lines dropped": lambda run, project: Run.objects.filter(pk=run.pk).update(log_lines_dropped=9),
    "a warning": lambda run, project: add_lines(run, 1, level=lambda seq: LogLevel.ERROR),
    "the run ends": lambda run, project: push(project, "r1", {"type": "state", "state": "done"}),
}


@pytest.mark.parametrize("query", ["", "?logs_before=150", "?logs_level=warning&logs_q=step"])
@pytest.mark.parametrize("change", list(LOG_CHANGES))
def test_the_cards_version_moves_whenever_its_render_does(alice, project, run, change, query):
    """The Logs card's share of test_card_versions' safety net: a poll re-renders a card only when its
    version moves, so every input of what the card shows must be in its version."""
    add_lines(run, 300)
    before = card_now(alice, query)
    LOG_CHANGES[change](run, project)
    after = card_now(alice, query)
    assert before[1] != after[1], f"{change} changed nothing: it tests nothing"
    assert before[0] != after[0], f"{change}: the card renders differently under the same version"
