"""The inbox page (issue 33 §5, walkthrough P2-1 and 18-inbox-mention-buried-in-needs-review.png): an
@mention first and rendered as Markdown (no raw `**`), a rule's notifications in one row per rule and
hour ("12 submissions waiting for review") that opens to its items, filters by kind and project, "Mark
these N read" per filter and per group; a bad filter is a 400 with the field; the Alerts tab refuses a
duplicate rule naming the existing one."""

from __future__ import annotations

import re

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import AlertRule, Notification, Run
from tests.tracking.test_alerts import push
from tests.tracking.test_inbox import needs_review

pytestmark = pytest.mark.django_db
INBOX = "/inbox/"


@pytest.fixture
def busy(alice, bob, project):
    services.create_alert_rule(
        project, by=alice, trigger="submission.needs_review", channel="inbox", recipient="alice"
    )
    needs_review(project, bob, 12)
    services.add_comment(
        by=bob,
        body="@alice can you upload it? **#approach** smaller net",
        run=Run.objects.get(external_id="s0"),
    )
    return project


def test_the_mention_comes_first_rendered_and_the_rule_is_one_row(client_alice, busy):
    body = client_alice.get(INBOX).content.decode()
    mentions, rest = body.index("data-mentions"), body.index("data-group=")
    assert mentions < rest  # old code: the mention 4th among needs_review items
    assert "<strong>#approach</strong>" in body and "**#approach**" not in body
    assert '<span class="mention" title="@alice">@alice</span>' in body
    assert body.count("data-group=") == 1 and "12 submissions waiting for review · Hill climb" in body
    assert len(re.findall(r'<li class="unread" data-notification="\d+">', body)) == 12  # inside the row
    assert "Mark these 12 read" in body


def test_a_mention_with_script_stays_text(client_alice, alice, bob, project):
    run = push(project, "r", {"type": "score", "score": 0.1})
    services.add_comment(by=bob, body="@alice <script>alert(1)</script> [x](javascript:alert(1))", run=run)
    body = client_alice.get(INBOX).content.decode()
    assert "<script>alert(1)" not in body and 'href="javascript' not in body


def test_filters_and_mark_these_read(client_alice, alice, busy):
    body = client_alice.get(INBOX, {"kind": "mention"}).content.decode()
    assert "data-group=" not in body and "Mark these 1 read" in body
    review = client_alice.get(INBOX, {"kind": "submission.needs_review", "project": "hill"})
    assert review.status_code == 200 and "Mark these 12 read" in review.content.decode()
    newest = Notification.objects.filter(recipient=alice).order_by("-id").first().pk
    answer = client_alice.post(
        "/inbox/read", {"filtered": "1", "kind": "submission.needs_review", "project": "hill", "upto": newest}
    )
    assert answer.status_code == 302 and "kind=submission.needs_review" in answer["Location"]
    unread = Notification.objects.filter(recipient=alice, read_at__isnull=True)
    assert [n.kind for n in unread] == ["mention"]


def test_mark_one_group_read(client_alice, alice, busy):
    body = client_alice.get(INBOX).content.decode()
    key = re.search(r'name="group" value="([^"]+)"', body)[1]
    top = re.search(r'name="upto" value="(\d+)"', body[body.index(key) :])[1]
    client_alice.post("/inbox/read", {"group": key, "upto": top})
    assert Notification.objects.filter(recipient=alice, read_at__isnull=True).count() == 1


@pytest.mark.parametrize(
    ("params", "field"), [({"kind": "pager"}, "kind"), ({"project": "other"}, "project")]
)
def test_a_bad_filter_is_a_400_naming_the_field(client_alice, other_project, busy, params, field):
    answer = client_alice.get(INBOX, params)
    assert answer.status_code == 400
    assert f"{field}:" in answer.content.decode() and "data-filter-error" in answer.content.decode()


def test_the_alerts_tab_refuses_a_duplicate_rule_naming_it(client_alice, alice, project):
    first = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="email", target="a@example.com"
    )
    answer = client_alice.post(
        "/projects/hill/alerts/", {"trigger": "run.failed", "channel": "email", "target": "a@example.com"}
    )
    assert answer.status_code == 400
    assert f"This rule exists already: rule #{first.pk}" in answer.content.decode()
    assert AlertRule.objects.count() == 1
    digest = client_alice.post(
        "/projects/hill/alerts/",
        {
            "trigger": "submission.needs_review",
            "channel": "email",
            "target": "a@example.com",
            "digest_minutes": "60",
        },
    )
    assert digest.status_code == 302
    assert AlertRule.objects.get(trigger="submission.needs_review").digest_minutes == 60
