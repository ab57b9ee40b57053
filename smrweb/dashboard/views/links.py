"""Signed links: `/a/<token>/` serves an artifact's exact bytes, `/b/<token>/` a submission's signed
reproducibility bundle, to anyone holding an unexpired link, with no session (pasted into an arena upload
form, fetched with curl). See core/signed_links.py."""

from django.shortcuts import render
from django.views.decorators.http import require_safe

from smrweb.core import signed_links
from smrweb.dashboard.artifacts import (
    artifact_for_token,
    artifact_response,
    missing_bytes_page,
    submission_for_token,
)
from smrweb.sources import bundles
from smrweb.tracking.errors import ArtifactBytesMissing, NoBundle


@require_safe
def download_by_link(request, token: str):
    """GET/HEAD: the bytes and digest headers; 410 when expired, 403 for anything else that is not a
    link we issued for the artifact's current bytes (never a 500, whatever the token holds)."""
    return _serve(request, lambda: artifact_response(artifact_for_token(token)))


@require_safe
def bundle_by_link(request, token: str):
    """GET/HEAD: the submission's signed bundle, refused as an artifact's link is."""

    def respond():
        sub = submission_for_token(token)
        return bundles.download(sub.project, sub.pk)

    return _serve(request, respond)


def _serve(request, respond):
    try:
        response = respond()
    except signed_links.ExpiredLink as exc:
        response = _refused(
            request,
            410,
            "Link expired",
            f"{exc} Copy a fresh link from the run page (signed-in members can).",
        )
    except signed_links.BadLink as exc:
        response = _refused(request, 403, "Link not valid", str(exc))
    except ArtifactBytesMissing as exc:
        response = missing_bytes_page(request, exc)
    except NoBundle as exc:  # its artifact was unlinked after the link was made
        response = _refused(request, 409, "No bundle", exc.message)
    # The token is a bearer credential: keep it out of shared caches and other sites' Referer headers.
    response["Cache-Control"] = "private, no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _refused(request, status: int, title: str, message: str):
    return render(
        request,
        "dashboard/link_refused.html",
        {"status": status, "title": title, "message": message},
        status=status,
    )
