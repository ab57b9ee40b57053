"""Read-only share links (issue 39, item 5): a comparison, a tree of attempts, an arena history or a
scenario's cross-project leaderboard, opened at `/s/<token>/` without signing in. A link is expiring,
revocable and audited; only the sha256 of its token is stored (the URL is shown once, as an API token's
secret is). The links of a project's pages name the project; a leaderboard's names the scenario, and shows
what its creator can read when it is opened (services/shares.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.models.project import Project
from smrweb.tracking.models.scenario import Scenario


class ShareKind(models.TextChoices):
    COMPARE = "compare", "Comparison"
    TREE = "tree", "Tree of attempts"
    ARENA = "arena", "Arena history"
    LEADERBOARD = "leaderboard", "Leaderboard across projects"


PROJECT_KINDS = (ShareKind.COMPARE, ShareKind.TREE, ShareKind.ARENA)


class ShareLink(models.Model):
    # A project's page (compare, tree, arena); None for a scenario's leaderboard, which names `scenario`.
    project = models.ForeignKey(Project, models.CASCADE, null=True, blank=True, related_name="share_links")
    scenario = models.ForeignKey(Scenario, models.CASCADE, null=True, blank=True, related_name="share_links")
    kind = models.CharField(max_length=20, choices=ShareKind)
    # The query string of the page that was shared, normalised by `filters.share_query`: only the
    # parameters that page reads, in one order (`runs=…&metric=…&x=…`, the tree's filters, `arena_x=…`).
    query = models.CharField(max_length=4000, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 of the token: the URL is shown once
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Counted by one UPDATE per view (services.shares.resolve_share_link), never an audit row per view.
    view_count = models.PositiveIntegerField(default=0)
    last_viewed = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(kind="leaderboard", project__isnull=True, scenario__isnull=False)
                    | (~Q(kind="leaderboard") & Q(project__isnull=False, scenario__isnull=True))
                ),
                name="sharelink_project_or_scenario",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
