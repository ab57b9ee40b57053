"""What people write on runs and submissions: a run's tags (labels and key → value tags, one model, as
MLflow has them), its note, and comments on runs and on submissions."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models.project import Project
from smrweb.tracking.models.run import Run
from smrweb.tracking.models.submission import Submission


class RunTag(models.Model):
    """A tag of a run: `key` → `value` (MLflow's tags), or a label when `value` is empty. A run has each
    key once, so setting a key again replaces its value."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="tags")
    key = models.CharField(max_length=250)
    value = models.CharField(max_length=5000, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]
        constraints = [
            # Also the runs filter's index: `?tag=` asks, per run, for a key (and value).
            models.UniqueConstraint(fields=["run", "key"], name="runtag_run_key_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value}" if self.value else self.key


# Tag keys are what MLflow allows (its client sends `mlflow.source.name`, people write "learning rate"):
# letters, digits, _ - . / : and inner spaces, starting with a letter, digit or underscore; "=" separates a
# key from its value where tags are typed (the tag box, `?tag=`).
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.:/ -]*[A-Za-z0-9_.:/-])?\Z")
TAG_KEY_MAX = RunTag._meta.get_field("key").max_length  # 250, MLflow's
TAG_VALUE_MAX = RunTag._meta.get_field("value").max_length  # 5000


def clean_text(field: str, value: Any, *, limit: int, required: bool = False) -> str:
    """Stripped text, refused (naming `field`) when too long, empty but required, or holding control
    characters other than tab and newlines."""
    if not isinstance(value, str):
        raise InvalidInput(field, "Expected text.")
    value = value.strip()
    if required and not value:
        raise InvalidInput(field, "Write something first.")
    if len(value) > limit:
        raise InvalidInput(field, f"At most {limit} characters (this has {len(value)}).")
    if any(ord(c) < 32 and c not in "\t\r\n" for c in value) or "\x7f" in value:
        raise InvalidInput(field, "Control characters (such as NUL) cannot be stored.")
    return value


def check_tag(key: Any, value: Any = "") -> tuple[str, str]:
    """A tag's key and value as stored; InvalidInput naming `key` or `value` otherwise."""
    key = clean_text("key", key, limit=TAG_KEY_MAX, required=True)
    if not TAG_KEY_RE.match(key):
        raise InvalidInput(
            "key",
            f"A tag key is 1 to {TAG_KEY_MAX} letters, digits, spaces and _ - . / :, starting with a letter, "
            f"digit or underscore (not {key[:40]!r}).",
        )
    value = clean_text("value", "" if value is None else value, limit=TAG_VALUE_MAX)
    if "\n" in value or "\r" in value:
        raise InvalidInput("value", "A tag's value is one line.")
    return key, value


def parse_tag(text: Any) -> tuple[str, str]:
    """`key` (a label) or `key=value`, as typed in the run page's tag box and in `?tag=`."""
    if not isinstance(text, str):
        raise InvalidInput("tag", "Expected `key` or `key=value`.")
    key, _, value = text.strip().partition("=")
    try:
        return check_tag(key.strip(), value.strip())
    except InvalidInput as exc:
        raise InvalidInput("tag", exc.message) from None


class RunNote(models.Model):
    """A run's note (Markdown): why it failed, what it tried. `#approach` in it carries it forward."""

    run = models.OneToOneField(Run, models.CASCADE, related_name="note")
    body = models.TextField()
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"note on {self.run_id}"


class Comment(models.Model):
    """A comment (Markdown) on a run or on a submission of `project`. A deleted comment keeps its place in
    the thread, without its text."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="comments")
    run = models.ForeignKey(
        Run, models.CASCADE, null=True, blank=True, related_name="comments", db_index=False
    )
    submission = models.ForeignKey(
        Submission, models.CASCADE, null=True, blank=True, related_name="comments", db_index=False
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    body = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    edited_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(run__isnull=False, submission__isnull=True)
                | Q(run__isnull=True, submission__isnull=False),
                name="comment_one_subject",
            )
        ]
        indexes = [
            # A thread, oldest first: the run page's and the submission page's comments.
            models.Index(fields=["run", "created"], name="comment_run_created_idx"),
            models.Index(fields=["submission", "created"], name="comment_sub_created_idx"),
        ]

    def __str__(self) -> str:
        on = f"run {self.run_id}" if self.run_id else f"submission {self.submission_id}"
        return f"comment {self.pk} on {on}"

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None
