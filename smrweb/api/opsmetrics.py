"""/metrics: Prometheus' text format for the people who run smrweb (docs/operations.md#metrics).

Not for project members: it names every project. A scrape is let in by a bearer token
(`SMRWEB_METRICS_TOKEN`) or by connecting directly from an allowed network (`SMRWEB_METRICS_ALLOW_IPS`:
loopback by default, nothing in production); anything else is a 403 that says which of the two to set up.

The network rule trusts only the TCP peer of a request that names no other client (finding N6). A
request a proxy forwarded (X-Forwarded-For, Forwarded or X-Real-IP present) comes from the proxy's
address, which says nothing of the client — a proxy on the same host made every internet client
"loopback" — and the address it forwards is one a client reaching gunicorn directly can write itself.
Through a proxy, only the token lets a scraper in.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import time

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from smrweb.core import opsmetrics as counters
from smrweb.sources import opsmetrics

FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def _allowed(request) -> bool:
    token = settings.SMRWEB_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer ") and hmac.compare_digest(header[7:].strip(), token):
        return True
    if any(request.headers.get(name) is not None for name in FORWARDING_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.SMRWEB_METRICS_ALLOW_IPS)


@require_GET
def metrics(request):
    if not _allowed(request):
        return HttpResponse(
            "403: /metrics answers scrapers with SMRWEB_METRICS_TOKEN as a bearer token, or connecting "
            "directly (not through a proxy) from the networks in SMRWEB_METRICS_ALLOW_IPS.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(opsmetrics.render(), content_type=CONTENT_TYPE_LATEST)


def counted_ingest(via: str):
    """Count an ingest view's requests by outcome (accepted 2xx, refused 4xx, error 5xx) and time them."""

    def decorate(view):
        @functools.wraps(view)
        def counted(request, *args, **kwargs):
            started = time.perf_counter()
            outcome = "error"
            with counters.batched():  # these counts and the view's own: one round trip to Redis
                try:
                    response = view(request, *args, **kwargs)
                    code = response.status_code
                    outcome = "accepted" if code < 400 else "refused" if code < 500 else "error"
                    return response
                finally:
                    counters.count("ingest_requests", via=via, outcome=outcome)
                    counters.observe("ingest_request_seconds", time.perf_counter() - started, via=via)

        return counted

    return decorate
