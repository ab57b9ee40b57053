"""A saved view of a project's runs table: its filters, columns, sort and grouping under a name, kept
private to the person who saved it or shared with the project's members, and opened by `?view=<id>` on the
project page and in the runs API."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.models.project import Project


class SavedViewQuerySet(models.QuerySet):
    def visible_to(self, user) -> SavedViewQuerySet:
        """The views `user` may open: the shared ones and their own (a project token, no user: shared)."""
        if user is None or not getattr(user, "is_authenticated", False):
            return self.filter(shared=True)
        return self.filter(Q(shared=True) | Q(owner=user))


class SavedView(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    shared = models.BooleanField(default=False)  # shown to every member; else to its owner only
    # The runs table's query string as the view holds it (`state=…&col=param:lr&sort=-col:metric:loss…`),
    # normalized by `queries.views.view_query`: only the parameters a view keeps, in one order.
    query = models.CharField(max_length=4000, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = SavedViewQuerySet.as_manager()

    class Meta:
        ordering = ["name", "pk"]
        constraints = [
            # One name per person per project (two people may each have their "baseline").
            models.UniqueConstraint(fields=["project", "owner", "name"], name="savedview_owner_name_uniq"),
        ]

    def __str__(self) -> str:
        return self.name
