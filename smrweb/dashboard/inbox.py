"""The in-app inbox in every page's header: the signed-in person's unread count (one query, and only when
a page's header shows it), and the links of notifications made to work on whatever host serves them."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.utils.functional import SimpleLazyObject

from smrweb.tracking.queries import alerts


def context(request) -> dict:
    """`inbox_unread` for base.html: counted when the template reads it, so fragments, polls and JSON
    answers never pay for it."""
    user = getattr(request, "user", None)
    return {"inbox_unread": SimpleLazyObject(lambda: alerts.unread_count(user))}


def local_link(url: str) -> str:
    """A notification's link as this page should write it: stored absolute under SMRWEB_BASE_URL, so a
    link to that host becomes its path (and query), which works on any host this server answers on;
    another http(s) address stays as stored, and anything else is no link ("")."""
    try:
        parts = urlsplit(url or "")
        base = urlsplit(settings.SMRWEB_BASE_URL)
    except ValueError:
        return ""
    if parts.scheme in ("http", "https") and parts.netloc.lower() == base.netloc.lower():
        # One leading slash: "//host/…" would be a link to another host.
        return urlunsplit(("", "", "/" + parts.path.lstrip("/"), parts.query, parts.fragment))
    if parts.scheme in ("http", "https") and parts.netloc:
        return url
    return ""
