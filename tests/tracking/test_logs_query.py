"""`queries.logs.log_page`: paging a run's log by seq, the level and text filters, the tail, and the
query count that does not grow with the log."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from smrweb.tracking.models import LogLevel, Run, RunLogLine
from smrweb.tracking.queries.logs import LOG_PAGE_MAX, log_page

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
def run(project):
    run = Run.objects.create(project=project, external_id="r1")
    # 1..30; every 5th a warning, every 10th an error whose text says "Boom"
    RunLogLine.objects.bulk_create(
        RunLogLine(
            run=run,
            seq=seq,
            ts=WHEN,
            level=LogLevel.ERROR if seq % 10 == 0 else LogLevel.WARNING if seq % 5 == 0 else LogLevel.INFO,
            text=f"line {seq}" + (" Boom" if seq % 10 == 0 else ""),
        )
        for seq in range(1, 31)
    )
    return run


def seqs(page):
    return [line.seq for line in page.lines]


def test_the_tail_is_the_newest_lines_oldest_first(run, django_assert_num_queries):
    with django_assert_num_queries(1):
        page = log_page(run, limit=4)
    assert seqs(page) == [27, 28, 29, 30]
    assert (page.has_older, page.has_newer, page.first_seq, page.last_seq) == (True, False, 27, 30)


def test_after_reads_forward_and_before_reads_back(run, django_assert_num_queries):
    with django_assert_num_queries(2):
        forward = log_page(run, after=10, limit=5)
    assert seqs(forward) == [11, 12, 13, 14, 15]
    assert (forward.has_older, forward.has_newer) == (True, True)
    back = log_page(run, before=4, limit=5)
    assert seqs(back) == [1, 2, 3]
    assert (back.has_older, back.has_newer) == (False, True)
    end = log_page(run, after=28, limit=5)
    assert seqs(end) == [29, 30] and not end.has_newer
    window = log_page(run, after=5, before=9, limit=10)
    assert seqs(window) == [6, 7, 8] and window.has_older and window.has_newer


def test_level_and_search_filter_and_page_within_the_match(run):
    warnings = log_page(run, min_level=LogLevel.WARNING, limit=3)
    assert seqs(warnings) == [20, 25, 30] and warnings.has_older
    assert seqs(log_page(run, min_level=LogLevel.ERROR)) == [10, 20, 30]
    boom = log_page(run, search="boom", after=10)
    assert seqs(boom) == [20, 30] and boom.has_older and not boom.has_newer
    assert log_page(run, search="nothing like it").lines == []


def test_limit_is_clamped_and_an_empty_log_is_one_empty_page(run, project):
    assert log_page(run, limit=10**9).limit == LOG_PAGE_MAX
    assert seqs(log_page(run, limit=0)) == [30]
    empty = log_page(Run.objects.create(project=project, external_id="quiet"))
    assert (empty.lines, empty.has_older, empty.has_newer, empty.first_seq) == ([], False, False, None)


@pytest.mark.parametrize(
    ("given", "level"),
    [("warning", 30), ("WARN", 30), ("fatal", 50), (40, 40), ("15", 15), (" Info ", 20)],
)
def test_levels_parse_from_names_and_numbers(given, level):
    assert LogLevel.parse(given) == level


@pytest.mark.parametrize("given", ["loud", 0, 51, True, None, 3.5, ""])
def test_unknown_levels_are_refused(given):
    with pytest.raises(ValueError, match="debug, info, warning"):
        LogLevel.parse(given)
