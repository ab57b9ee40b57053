"""Email digests by the real worker through the real SMTP catcher (issue 33 §5, walkthrough P2-1: every
verified submission was an email, 1,085 in 38 minutes). Three submissions verified: the worker evaluates
each and holds it; nothing is mailed one by one; when the window has passed, beat's task queues the
digest and the worker sends one email listing the three, newest first; a second tick sends nothing."""

from __future__ import annotations

import time
from datetime import timedelta
from email import message_from_string, policy

import pytest
from django.core.cache import cache
from django.utils import timezone

from smrweb import tasks
from smrweb.core import cachekeys
from smrweb.tracking import services
from smrweb.tracking.models import Channel, Notification, NotificationStatus, Trigger
from smrweb.tracking.services import submissions as lifecycle
from tests.conftest import wait_for
from tests.tracking.test_alerts import push

N = NotificationStatus


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_review_digest_is_one_email_sent_by_the_worker(project, alice, bob, celery_worker, mail_catcher):
    rule = services.create_alert_rule(
        project,
        by=alice,
        trigger=Trigger.SUBMISSION_NEEDS_REVIEW,
        channel=Channel.EMAIL,
        target="rev@example.com",
    )
    assert (rule.delivery, rule.digest_minutes) == ("digest", 30)  # the default for this trigger
    mail_catcher.messages.clear()
    subs = []
    for value in (0.31, 0.32, 0.33):
        push(project, "r1", {"type": "score", "score": value})
        sub = project.submissions.order_by("-id").first()
        lifecycle.request_verification(sub, by=bob)
        # The worker clears an evaluation's coalescing key in its own cache (Redis), not in this test's
        # private one (conftest.private_cache): cleared here as the worker's start would have.
        cache.delete(cachekeys.alerts_due("submission", sub.pk))
        # The commit announces the change: the worker evaluates the rule (signals → Redis → Celery).
        subs.append(
            lifecycle.record_verification(sub.pk, lifecycle.VerificationResult("passed", 0, "ok", "ok"))
        )

    def all_held():
        ids = list(Notification.objects.filter(rule=rule, status=N.HELD).values_list("pk", flat=True))
        return ids if len(ids) == 3 else None

    held = wait_for(all_held, timeout=60)
    time.sleep(2)
    assert mail_catcher.messages == []  # old code: three emails, one per verified submission

    # The window passes (as if 31 minutes went by); beat's tick queues the digest, the worker sends it.
    Notification.objects.filter(pk__in=held).update(created=timezone.now() - timedelta(minutes=31))
    tasks.send_alert_digests.delay()
    [message] = mail_catcher.wait_for(1, timeout=60)
    mail = message_from_string(message["data"], policy=policy.default)
    assert message["to"] == ["rev@example.com"]
    assert mail["Subject"].strip() == "[smrweb] 3 submissions waiting for review — Hill climb"
    assert mail["X-Smrweb-Digest"] == "3"
    body = mail.get_content()
    links = [f"/projects/hill/submissions/{s.pk}/" for s in subs]
    positions = [body.index(link) for link in reversed(links)]
    assert positions == sorted(positions)  # newest first
    wait_for(lambda: set(rule.notifications.values_list("status", flat=True)) == {N.SENT}, timeout=30)

    # The next tick: nothing held, nothing sent.
    tasks.send_alert_digests.delay()
    time.sleep(3)
    assert len(mail_catcher.messages) == 1
