"""Artifacts on the dashboard: their download response and their signed links (`/a/<token>/`), and a
submission's reproducibility bundle with its signed link (`/b/<token>/`). The rules live in core
(`core.downloads`: what a download may be; `core.signed_links`: the token); this joins them to the
Artifact and Submission rows."""

from __future__ import annotations

from datetime import timedelta

from django.http import FileResponse, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from smrweb.core import signed_links
from smrweb.core.downloads import attachment_response
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import Artifact, Submission


def artifact_response(artifact: Artifact) -> FileResponse:
    """The artifact's exact bytes as an attachment, with the digest in the headers."""
    return attachment_response(
        services.open_blob(artifact.blob),
        path=artifact.path,
        content_type=artifact.content_type,
        sha256=artifact.blob.sha256,
        size=artifact.blob.size,
    )


def missing_bytes_page(request, exc: ArtifactBytesMissing) -> HttpResponse:
    """The page a download shows when storage no longer holds the artifact's bytes (404, not a 500)."""
    return render(
        request,
        "dashboard/link_refused.html",
        {"status": 404, "title": "Artifact bytes missing", "message": exc.message},
        status=404,
    )


def signed_artifact_path(artifact: Artifact, *, ttl: timedelta | None = None) -> str:
    """`/a/<token>/` for `artifact`, valid for `ttl` (default: SMRWEB_SIGNED_LINK_TTL_SECONDS) from now.
    Needs `artifact.run` and `artifact.blob` (no query when they are already loaded)."""
    token = signed_links.make_token(
        artifact.pk, project_id=artifact.run.project_id, sha256=artifact.blob.sha256, ttl=ttl
    )
    return reverse("dashboard:artifact-link", args=[token])


def artifact_for_token(token: str) -> Artifact:
    """The artifact a token names, checked; raises ExpiredLink or TamperedLink (the same TamperedLink,
    with the same message, whether the id exists or the signature is wrong). The signature covers the
    artifact's project and bytes, so it is checked after the lookup; an unknown id is checked all the
    same, so both refusals cost the same work."""
    artifact = (
        Artifact.objects.select_related("blob", "run").filter(pk=signed_links.artifact_id(token)).first()
    )
    signed_links.check_token(
        token,
        project_id=artifact.run.project_id if artifact else None,
        sha256=artifact.blob.sha256 if artifact else None,
    )
    return artifact


def signed_bundle_path(sub: Submission, *, ttl: timedelta | None = None) -> str:
    """`/b/<token>/` for the bundle of `sub` (which has an artifact, with its blob loaded)."""
    token = signed_links.make_token(
        sub.pk, project_id=sub.project_id, sha256=sub.artifact.blob.sha256, ttl=ttl, kind="bundle"
    )
    return reverse("dashboard:bundle-link", args=[token])


def submission_for_token(token: str) -> Submission:
    """The submission whose bundle a token names, checked as `artifact_for_token` checks an artifact's."""
    sub = (
        Submission.objects.select_related("project", "artifact__blob")
        .filter(pk=signed_links.artifact_id(token), artifact__isnull=False)
        .first()
    )
    signed_links.check_token(
        token,
        project_id=sub.project_id if sub else None,
        sha256=sub.artifact.blob.sha256 if sub else None,
        kind="bundle",
    )
    return sub
