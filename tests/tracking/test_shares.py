"""Read-only share links (issue 39, item 5), the write side: who may create and revoke, the token kept only
as its hash, the audit rows, expiry and revocation when a link is opened, and its view count."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, NotAllowed, ShareLinkExpired, ShareLinkUnknown
from smrweb.tracking.models import AuditEvent, AuditVerb, Role, ShareKind, ShareLink
from smrweb.tracking.services import shares
from tests.factories import UserFactory, admin_project

pytestmark = pytest.mark.django_db


def share(project, by, kind=ShareKind.TREE, days=7, query=""):
    return services.create_share_link(by=by, kind=kind, days=days, query=query, project=project)


def test_a_reviewer_creates_a_link_kept_as_a_hash_and_audited(project, bob):
    link, raw = share(project, bob, ShareKind.COMPARE, days=30, query="runs=a&runs=b")
    assert len(raw) >= 40 and raw not in link.token_hash
    assert link.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert link.created_by == bob and link.project == project and link.scenario is None
    assert timedelta(days=30) - (link.expires_at - timezone.now()) < timedelta(minutes=1)
    event = AuditEvent.objects.get(verb=AuditVerb.SHARE_LINK_CREATED)
    assert (event.actor, event.project, event.object_type, event.object_id) == (
        bob,
        project,
        "sharelink",
        str(link.pk),
    )
    assert event.detail["kind"] == "compare" and event.detail["query"] == "runs=a&runs=b"
    assert raw not in str(event.detail)


def test_a_viewer_or_an_outsider_may_not_share(project, victor, carol):
    for who in (victor, carol):
        with pytest.raises(NotAllowed):
            share(project, who)
    assert (
        not ShareLink.objects.exists()
        and not AuditEvent.objects.filter(verb__startswith="share_link").exists()
    )


@pytest.mark.parametrize("days", [0, -1, 91, 365, "7", 1.5, True, None])
def test_the_expiry_is_1_to_90_days(project, alice, days):
    with pytest.raises(InvalidInput) as exc:
        share(project, alice, days=days)
    assert exc.value.field == "expires"


def test_unknown_kind_and_a_too_long_query_are_refused(project, alice):
    with pytest.raises(InvalidInput):
        share(project, alice, kind="runs")
    with pytest.raises(InvalidInput):
        share(project, alice, query="x" * (shares.QUERY_MAX + 1))
    with pytest.raises(InvalidInput):  # a project page without its project
        services.create_share_link(by=alice, kind=ShareKind.TREE, days=7)


def test_the_leaderboard_needs_a_project_on_the_scenario(project, alice, carol, other_project):
    scenario = project.scenario
    link, _ = services.create_share_link(by=alice, kind=ShareKind.LEADERBOARD, days=1, scenario=scenario)
    assert link.project is None and link.scenario == scenario
    lonely = UserFactory(username="lonely")
    with pytest.raises(NotAllowed):
        services.create_share_link(by=lonely, kind=ShareKind.LEADERBOARD, days=1, scenario=scenario)
    if other_project.scenario_id != scenario.pk:  # carol's project is on another scenario
        with pytest.raises(NotAllowed):
            services.create_share_link(by=carol, kind=ShareKind.LEADERBOARD, days=1, scenario=scenario)


def test_resolve_counts_views_without_audit_rows(project, bob):
    link, raw = share(project, bob)
    audited = AuditEvent.objects.count()
    for _ in range(3):
        assert services.resolve_share_link(raw).pk == link.pk
    link.refresh_from_db()
    assert link.view_count == 3 and link.last_viewed is not None
    assert AuditEvent.objects.count() == audited  # a view is one UPDATE, never an audit row


def test_expired_is_410_and_revoked_or_unknown_is_404(project, alice, bob):
    link, raw = share(project, bob, days=1)
    with time_machine.travel(timezone.now() + timedelta(days=1, seconds=1)):
        with pytest.raises(ShareLinkExpired) as exc:
            services.resolve_share_link(raw)
    assert exc.value.status == 410
    services.revoke_share_link(link, by=alice)  # an admin revokes a reviewer's link
    with pytest.raises(ShareLinkUnknown) as exc:
        services.resolve_share_link(raw)
    assert exc.value.status == 404
    for bad in ("", "x", raw[:-1] + ("A" if raw[-1] != "A" else "B"), "a" * 500):
        with pytest.raises(ShareLinkUnknown):
            services.resolve_share_link(bad)
    assert ShareLink.objects.get(pk=link.pk).view_count == 0


def test_revoking_is_the_creators_or_an_admins_and_audited_once(project, alice, bob, victor):
    link, _ = share(project, alice)
    with pytest.raises(NotAllowed):
        services.revoke_share_link(link, by=bob)  # a reviewer, not its creator
    with pytest.raises(NotAllowed):
        services.revoke_share_link(link, by=victor)
    mine, _ = share(project, bob)
    services.revoke_share_link(mine, by=bob)
    services.revoke_share_link(mine, by=bob)  # again: nothing more
    mine.refresh_from_db()
    assert mine.revoked_at is not None and mine.revoked_by == bob
    assert AuditEvent.objects.filter(verb=AuditVerb.SHARE_LINK_REVOKED).count() == 1


def test_a_link_dies_with_its_creators_access(project, alice, bob):
    _, raw = share(project, bob)
    services.resolve_share_link(raw)
    services.remove_member(project, bob, by=alice)
    with pytest.raises(ShareLinkUnknown):
        services.resolve_share_link(raw)


def test_a_link_dies_with_its_project(project, alice):
    _, raw = share(project, alice)
    project.delete()
    assert not ShareLink.objects.exists()
    with pytest.raises(ShareLinkUnknown):
        services.resolve_share_link(raw)


def test_a_person_has_at_most_so_many_active_links_per_project(project, bob, monkeypatch):
    monkeypatch.setattr(shares, "ACTIVE_PER_PERSON", 2)
    share(project, bob)
    link, _ = share(project, bob)
    with pytest.raises(InvalidInput):
        share(project, bob)
    services.revoke_share_link(link, by=bob)
    share(project, bob)  # a revoked link no longer counts


def test_superusers_may_share_and_revoke_anywhere(project, bob):
    root = UserFactory(username="root", is_superuser=True)
    link, _ = share(project, bob)
    services.revoke_share_link(link, by=root)
    assert share(project, root)[0].created_by == root
    other = admin_project("elsewhere", by=UserFactory(username="x"))
    assert not services.may_share(bob, project=other)
    assert services.may_share(bob, project=project) and not services.may_share(None, project=project)
    assert project.allows(bob, Role.REVIEWER)
