"""Project knowledge entries (notes, failed approaches, arena deltas)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from smrweb.tracking.models.project import Project
from smrweb.tracking.models.submission import Submission


class KnowledgeKind(models.TextChoices):
    NOTE = "note"
    FAILED_APPROACH = "failed_approach"
    ARENA_DELTA = "arena_delta"


class KnowledgeEntry(models.Model):
    project = models.ForeignKey(Project, models.CASCADE, related_name="knowledge_entries")
    kind = models.CharField(max_length=20, choices=KnowledgeKind, default=KnowledgeKind.NOTE)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    submission = models.ForeignKey(Submission, models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        verbose_name_plural = "knowledge entries"
