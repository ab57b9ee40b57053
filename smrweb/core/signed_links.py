"""Signed, expiring artifact links: `/a/<token>/` downloads an artifact without a session, so a link
can be pasted into an arena's upload form or a colleague's terminal.

A token is `<artifact id>.<expiry, base62 unix seconds>.<HMAC-SHA256>`, about 55 URL-safe characters.
Only the id and the expiry are readable; the signature also covers the artifact's project id and
sha256 (through the salt), so a link cannot be replayed for other bytes, for another artifact, or
after the artifact is moved. The expiry travels in the token (rather than TimestampSigner's issue
time plus a max_age) so that links with different lifetimes verify alike. It is rounded up to a step
of TTL/24 (at most an hour), so a page polled or reloaded within that step shows the same link; a link
lives at least its TTL and at most one step longer. Rotating SECRET_KEY (with SECRET_KEY_FALLBACKS)
works as for every Django signature.

The same tokens sign a submission's reproducibility bundle (`/b/<token>/`, `kind="bundle"`): the id is
the submission's, the digest its artifact's, and the kind is part of the salt, so an artifact's token
never opens a bundle nor the other way round.
"""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta

from django.conf import settings
from django.core import signing

SALT = "smrweb.artifact-link"
KINDS = ("artifact", "bundle")
# ASCII only: int() would accept other scripts' digits, and nothing longer than we ever issue.
TOKEN_RE = re.compile(r"([1-9][0-9]{0,17})\.([0-9A-Za-z]{1,11})\.([A-Za-z0-9_-]{43})", re.ASCII)


class BadLink(Exception):
    """The link cannot be used (the view answers 403, or 410 when it merely expired)."""


class ExpiredLink(BadLink):
    """A genuine link whose time is up: the user should copy a fresh one from the run page."""


class TamperedLink(BadLink):
    """Not a token this server signed for an artifact that exists with those bytes in that project."""


# One answer whether the id exists or not (red-team finding 11): without signing in, nobody learns which
# artifact ids exist by comparing refusals.
NOT_VALID = "This link is not valid: it was altered, or its artifact changed or no longer exists."


def default_ttl() -> timedelta:
    return timedelta(seconds=settings.SMRWEB_SIGNED_LINK_TTL_SECONDS)


def _signer(project_id: int | str, sha256: str, kind: str = "artifact") -> signing.Signer:
    if kind not in KINDS:
        raise ValueError(f"a signed link is for one of {KINDS}, not {kind!r}")
    # An artifact's salt is the one links were always signed with (links already copied stay valid).
    salt = f"{SALT}:{project_id}:{sha256}" if kind == "artifact" else f"{SALT}:{kind}:{project_id}:{sha256}"
    # "." rather than ":" keeps the token free of characters some forms and shells treat specially.
    return signing.Signer(salt=salt, sep=".")


def make_token(
    artifact_id: int, *, project_id: int, sha256: str, ttl: timedelta | None = None, kind: str = "artifact"
) -> str:
    """A token for the artifact `artifact_id` of `project_id` holding `sha256` (`kind="bundle"`: for the
    bundle of submission `artifact_id`, whose artifact holds `sha256`), valid for `ttl` (default:
    SMRWEB_SIGNED_LINK_TTL_SECONDS) from now."""
    seconds = int((default_ttl() if ttl is None else ttl).total_seconds())
    if seconds <= 0:
        raise ValueError("a signed link needs a positive lifetime")
    step = min(3600, max(1, seconds // 24))
    expires = math.ceil((time.time() + seconds) / step) * step
    return _signer(project_id, sha256, kind).sign(f"{artifact_id}.{signing.b62_encode(expires)}")


def artifact_id(token: str) -> int:
    """The artifact id a token names (unchecked); TamperedLink when it is not shaped like a token."""
    match = TOKEN_RE.fullmatch(token)
    if match is None:
        raise TamperedLink(NOT_VALID)
    return int(match[1])


def check_token(token: str, *, project_id: int | None, sha256: str | None, kind: str = "artifact") -> None:
    """Raise ExpiredLink or TamperedLink unless `token` was signed here for these bytes of this project and
    is unexpired; `project_id=None`: no such artifact (the same TamperedLink, with the same message and
    the same work). The signature is checked before the expiry, so an edited expiry is tampering."""
    match = TOKEN_RE.fullmatch(token)
    if match is None:
        raise TamperedLink(NOT_VALID)
    signer = _signer(project_id, sha256, kind) if project_id is not None else _signer("-", "-", kind)
    try:
        signer.unsign(token)
    except signing.BadSignature:
        raise TamperedLink(NOT_VALID) from None
    if project_id is None:  # a signature that verifies without an artifact cannot be made; kept for safety
        raise TamperedLink(NOT_VALID)
    if signing.b62_decode(match[2]) < time.time():
        raise ExpiredLink("This download link has expired.")
