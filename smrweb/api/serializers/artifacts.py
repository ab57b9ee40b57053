"""Artifacts: the listing, the upload form and its answer."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from smrweb.tracking.models import Artifact, ArtifactKind


class ArtifactSerializer(serializers.ModelSerializer):
    sha256 = serializers.CharField(source="blob.sha256")
    size = serializers.IntegerField(source="blob.size")
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = ["id", "path", "kind", "sha256", "size", "content_type", "commit", "created", "download_url"]

    def get_download_url(self, artifact: Artifact) -> str:
        request = self.context.get("request")
        path = reverse(
            "api:artifact-download", args=[artifact.run.project.slug, artifact.run.external_id, artifact.pk]
        )
        return request.build_absolute_uri(path) if request else path


class ArtifactUploadSerializer(serializers.Serializer):
    file = serializers.FileField()
    path = serializers.CharField(max_length=500, required=False)
    kind = serializers.ChoiceField(choices=ArtifactKind.choices, default=ArtifactKind.FILE)
    sha256 = serializers.RegexField(
        r"^[0-9a-fA-F]{64}$",
        required=False,
        error_messages={"invalid": "Expected 64 hexadecimal characters."},
    )
    commit = serializers.CharField(max_length=64, required=False, default="")


class ArtifactUploadResultSerializer(ArtifactSerializer):
    created_now = serializers.BooleanField()

    class Meta(ArtifactSerializer.Meta):
        fields = [*ArtifactSerializer.Meta.fields, "created_now"]
