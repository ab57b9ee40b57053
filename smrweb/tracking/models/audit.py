"""The audit trail: who did what to which object."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from smrweb.tracking.models.project import Project


class AuditEvent(models.Model):
    """Who did what to which object, and when. Written by services, never edited."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    actor_label = models.CharField(max_length=200)  # "alice", "token:ci-harness", "system"
    verb = models.CharField(max_length=100)
    # SET_NULL: a deleted project's trail survives (its slug is in `detail["project_slug"]` of its
    # "project.deleted" row).
    project = models.ForeignKey(Project, models.SET_NULL, null=True, blank=True, related_name="audit_events")
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=200)
    detail = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["project", "-created"], name="audit_project_created_idx")]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.object_type}:{self.object_id}"
