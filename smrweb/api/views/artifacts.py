"""A run's artifacts over the API: list, upload, download."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.access import actor_of, project_for, run_for
from smrweb.api.errors import rate_limited
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.artifacts import (
    ArtifactSerializer,
    ArtifactUploadResultSerializer,
    ArtifactUploadSerializer,
)
from smrweb.core import ratelimits
from smrweb.core.downloads import attachment_response
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactTooLarge
from smrweb.tracking.models import Artifact, Role


class RunArtifacts(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(responses={200: ArtifactSerializer(many=True), **ERRORS})
    def get(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        artifacts = Artifact.objects.filter(run=run).select_related("blob", "run__project")
        return Response(ArtifactSerializer(artifacts, many=True, context={"request": request}).data)

    @extend_schema(
        request={"multipart/form-data": ArtifactUploadSerializer},
        responses={
            201: ArtifactUploadResultSerializer,
            200: ArtifactUploadResultSerializer,
            413: OpenApiResponse(
                ERROR,
                description="Larger than SMRWEB_MAX_ARTIFACT_BYTES, or over the project's storage quota.",
            ),
            429: OpenApiResponse(
                ERROR, description="Too many uploads from this caller (SMRWEB_UPLOAD_RATE)."
            ),
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
        },
        description="Upload one file. The server computes its sha256 and, when `sha256` is sent, refuses a "
        "mismatch. "
        "The same bytes at the same path are stored once (200); new content answers 201.",
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)
        limited = ratelimits.hit(
            request, group="upload", rate=settings.SMRWEB_UPLOAD_RATE, keys=[ratelimits.by_principal]
        )
        if limited:  # before the body is read (finding 10)
            return rate_limited(limited)
        # Refuse an announced oversize body before Django spools it to disk.
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.SMRWEB_MAX_ARTIFACT_BYTES + 1024 * 1024:
            raise ArtifactTooLarge(f"Artifacts are limited to {settings.SMRWEB_MAX_ARTIFACT_BYTES} bytes.")
        form = ArtifactUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        upload = form.validated_data["file"]
        artifact, created = services.store_artifact(
            project,
            run_id,
            path=form.validated_data.get("path") or upload.name,
            content=upload,
            kind=form.validated_data["kind"],
            content_type=upload.content_type or "application/octet-stream",
            claimed_sha256=form.validated_data.get("sha256"),
            commit=form.validated_data["commit"],
            by=actor_of(request),
        )
        artifact.created_now = created
        data = ArtifactUploadResultSerializer(artifact, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **ERRORS})
class ArtifactDownload(APIView):
    def get(self, request, slug: str, run_id: str, artifact_id: int):
        run = run_for(project_for(request, slug), run_id)
        artifact = get_object_or_404(Artifact.objects.select_related("blob"), run=run, pk=artifact_id)
        return attachment_response(
            services.open_blob(artifact.blob),
            path=artifact.path,
            content_type=artifact.content_type,
            sha256=artifact.blob.sha256,
            size=artifact.blob.size,
        )
