"""A submission's reproducibility bundle (issue 39): the artifact's bytes, the validator scripts the
scenario's command runs, the recorded validator output and the kickoff, with a manifest signed by this
installation's key (the format: `core.bundles`; the facts: `tracking.queries.bundles`). Both faces serve
it (the API's `…/submissions/{id}/bundle`, the submission page and its signed link `/b/<token>/`); the
public key is `GET /api/v1/bundle-key`. Next to `verification`: a bundle is what a verification ran on,
so `smrweb rescore` can run it again elsewhere."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

from smrweb.core import bundles
from smrweb.core.downloads import attachment_response
from smrweb.sources.preflight import VALIDATORS_DIR
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import Submission
from smrweb.tracking.queries import bundles as facts

_VALIDATOR_FILE = re.compile(r"\{validators\}/([A-Za-z0-9._/-]+)")
SPOOL_BYTES = 8 * 1024**2  # a bundle is built in memory up to this, then in a temporary file
OUTPUT_FILE = "verification-output.txt"
KICKOFF_FILE = "kickoff.txt"


@lru_cache(maxsize=8)
def _key(secret: str):
    return bundles.signing_key(secret)


def signing_key():
    """This installation's bundle key (derived from SECRET_KEY; see core.bundles)."""
    return _key(settings.SECRET_KEY)


def published_keys() -> dict:
    """What `GET /api/v1/bundle-key` answers: the current key, and in `previous` the keys of
    SECRET_KEY_FALLBACKS, so bundles signed before a key rotation still verify."""
    previous = [
        bundles.describe_key(_key(secret)) for secret in getattr(settings, "SECRET_KEY_FALLBACKS", [])
    ]
    return {**bundles.describe_key(signing_key()), "format": bundles.FORMAT, "previous": previous}


def validator_files(command: list[str], folder: Path = VALIDATORS_DIR) -> dict[str, Path]:
    """The scripts of smrweb's validators a command runs (`{validators}/<name>`), by their name under
    `{validators}`: the files a bundle carries so the same validator can run elsewhere."""
    found: dict[str, Path] = {}
    root = folder.resolve()
    for arg in command or []:
        for rel in _VALIDATOR_FILE.findall(str(arg)):
            path = (root / rel).resolve()
            if path.is_relative_to(root) and path.is_file() and ".." not in PurePosixPath(rel).parts:
                found[PurePosixPath(rel).as_posix()] = path
    return found


def validator_section(command: list[str], digests: dict[str, str]) -> dict:
    """The manifest's `validator`: its name, command, files and one digest over the command and files."""
    names = [PurePosixPath(rel).name for rel in digests] or [PurePosixPath(str((command or [""])[0])).name]
    digest = hashlib.sha256(
        json.dumps({"command": command, "files": digests}, sort_keys=True).encode()
    ).hexdigest()
    return {
        "name": names[0],
        "command": list(command or []),
        "files": {rel: f"validator/{rel}" for rel in digests},
        "digest": digest,
    }


@dataclass
class Bundle:
    filename: str
    file: IO[bytes]  # positioned at its start; the response closes it
    size: int
    sha256: str
    manifest: dict


def build(sub: Submission) -> Bundle:
    """The signed bundle of `sub` (loaded by `queries.bundles.bundled_submission`). ArtifactBytesMissing
    when storage no longer holds the artifact's bytes, or holds other bytes than its digest."""
    described, kickoff = facts.bundle_facts(sub)
    scenario = sub.project.scenario
    with tempfile.TemporaryDirectory(prefix="smrweb-bundle-") as tmp:
        artifact_file = Path(tmp) / "artifact"
        h = hashlib.sha256()
        with services.open_blob(sub.artifact.blob) as src, open(artifact_file, "wb") as out:
            while chunk := src.read(1024 * 1024):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != sub.artifact.blob.sha256:
            raise ArtifactBytesMissing(
                f"The stored bytes of artifact {sub.artifact.blob.sha256} no longer match their digest "
                f"(they hash to {h.hexdigest()}); an operator can restore them from a backup."
            )
        artifact_name = f"artifact/{bundles.safe_name(sub.artifact.path)}"
        scripts = validator_files(list(scenario.validator_command))
        entries = [
            bundles.Entry(artifact_name, path=artifact_file),
            bundles.Entry(OUTPUT_FILE, data=sub.verification_output.encode("utf-8")),
            bundles.Entry(KICKOFF_FILE, data=kickoff.encode("utf-8")),
            *(bundles.Entry(f"validator/{rel}", path=path) for rel, path in scripts.items()),
        ]
        digests = {rel: bundles.Entry("x", path=path).digest()[0] for rel, path in scripts.items()}
        manifest = {
            **described,
            "server": settings.SMRWEB_BASE_URL,
            "validator": validator_section(list(scenario.validator_command), digests),
        }
        manifest["artifact"]["file"] = artifact_name
        manifest["verification"]["output_file"] = OUTPUT_FILE
        manifest["kickoff"]["file"] = KICKOFF_FILE
        root = f"smrweb-bundle-{sub.project.slug}-{sub.pk}"
        out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
        written = bundles.write(
            out,
            root=root,
            manifest=manifest,
            entries=entries,
            key=signing_key(),
            mtime=int(sub.created.timestamp()),
        )
    size = out.tell()
    out.seek(0)
    digest = hashlib.sha256()
    while chunk := out.read(1024 * 1024):
        digest.update(chunk)
    out.seek(0)
    return Bundle(f"{root}.tar.gz", out, size, digest.hexdigest(), written)


def download(project, submission_id: int):
    """The signed bundle of a project's submission as an attachment (inert type, its own digest in the
    headers): what the API, the submission page and the signed link `/b/<token>/` all answer. NoBundle
    without an artifact, ArtifactBytesMissing when storage lost its bytes."""
    bundle = build(facts.bundled_submission(project, submission_id))
    return attachment_response(
        bundle.file,
        path=bundle.filename,
        content_type="application/gzip",
        sha256=bundle.sha256,
        size=bundle.size,
    )
