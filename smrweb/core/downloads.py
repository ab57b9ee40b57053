"""Artifact downloads, shared by the API and the dashboard."""

import base64
import posixpath

from django.http import FileResponse

from smrweb.tracking import services
from smrweb.tracking.models import Artifact


def artifact_response(artifact: Artifact) -> FileResponse:
    """The artifact's exact bytes, named after its path, with the digest in the headers."""
    response = FileResponse(
        services.open_blob(artifact.blob),
        as_attachment=True,
        filename=posixpath.basename(artifact.path) or "artifact",
        content_type=artifact.content_type,
    )
    digest = bytes.fromhex(artifact.blob.sha256)
    response["X-Content-SHA256"] = artifact.blob.sha256
    response["Repr-Digest"] = f"sha-256=:{base64.b64encode(digest).decode()}:"  # RFC 9530
    response["Content-Length"] = str(artifact.blob.size)
    return response
