"""What people write on runs and submissions: tags, the run's note, comments (Markdown in, the sanitized
HTML out beside it)."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import TAG_KEY_MAX, TAG_VALUE_MAX, Comment, RunTag
from smrweb.tracking.services.annotations import TEXT_MAX


class TagSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunTag
        fields = ["key", "value"]


class TagIn(serializers.Serializer):
    key = serializers.CharField(
        max_length=TAG_KEY_MAX,
        help_text="Letters, digits and _ - . / :, starting with a letter, digit or underscore.",
    )
    value = serializers.CharField(
        max_length=TAG_VALUE_MAX,
        required=False,
        allow_blank=True,
        default="",
        help_text="Empty (or left out): the tag is a label. Setting a key the run has replaces its value.",
    )


class NoteSerializer(serializers.Serializer):
    body = serializers.CharField(help_text="Markdown, as written; empty when the run has no note.")
    html = serializers.CharField(help_text="The body rendered: sanitized HTML, safe to show as it is.")
    edited_by = serializers.CharField(allow_null=True)
    updated = serializers.DateTimeField(allow_null=True)


class NoteIn(serializers.Serializer):
    body = serializers.CharField(
        max_length=TEXT_MAX,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Markdown (raw HTML is shown as text); empty deletes the note. `#approach` carries it into "
        "the knowledge carry-forward block.",
    )


class CommentSerializer(serializers.ModelSerializer):
    author = serializers.SerializerMethodField()
    html = serializers.SerializerMethodField(help_text="The body rendered: sanitized HTML, mentions marked.")
    deleted = serializers.BooleanField(source="is_deleted", help_text="A deleted comment has no body.")

    class Meta:
        model = Comment
        fields = ["id", "author", "body", "html", "created", "edited_at", "deleted"]

    def get_author(self, comment: Comment) -> str | None:
        return comment.author.get_username() if comment.author else None

    def get_html(self, comment: Comment) -> str:
        return getattr(comment, "html", "")


class CommentIn(serializers.Serializer):
    body = serializers.CharField(
        max_length=TEXT_MAX,
        trim_whitespace=False,
        help_text="Markdown; `@username` of a project member puts it in their inbox; `#approach` carries it "
        "into the knowledge carry-forward block.",
    )
