"""Refuse NUL characters in the path or query string up front: PostgreSQL cannot compare text with
U+0000, so such a lookup would fail deep in a query instead of answering 400/404."""

from django.core.signals import request_finished
from django.http import HttpResponseBadRequest, JsonResponse

from smrweb.core import softcache


class RejectNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any(
            "\x00" in v for values in request.GET.lists() for v in values[1] + [values[0]]
        ):
            message = "The URL must not contain the NUL character (%00)."
            if request.path.startswith("/api/"):
                return JsonResponse({"code": "bad_request", "message": message, "errors": []}, status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)


def start_session_clock(sender, request, user, **kwargs) -> None:
    """At sign-in (user_logged_in): the session's clocks start, so its first request writes nothing."""
    import time

    now = int(time.time())
    request.session[SessionIdleTimeoutMiddleware.SEEN] = now
    request.session[SessionIdleTimeoutMiddleware.STARTED] = now


class SessionIdleTimeoutMiddleware:
    """Sign a session out after SMRWEB_SESSION_IDLE_SECONDS without the person doing anything, and after
    SMRWEB_SESSION_MAX_AGE_SECONDS whatever they do (red-team finding 15: 14 days, no idle expiry).

    A dashboard's own polls (htmx requests carrying the version they hold) are not activity: a tab left
    open overnight is not a person. The time of the last activity is written at most once a minute."""

    SEEN, STARTED = "smrweb_seen", "smrweb_started"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            import time

            from django.conf import settings
            from django.contrib.auth import logout

            now = int(time.time())
            seen = request.session.get(self.SEEN, now)
            started = request.session.setdefault(self.STARTED, now)
            if (
                now - seen > settings.SMRWEB_SESSION_IDLE_SECONDS
                or now - started > settings.SMRWEB_SESSION_MAX_AGE_SECONDS
            ):
                logout(request)  # flushes the session; the view then sees an anonymous visitor
            elif not self._is_poll(request) and now - seen >= 60 or self.SEEN not in request.session:
                request.session[self.SEEN] = now
        return self.get_response(request)

    @staticmethod
    def _is_poll(request) -> bool:
        # Either poll header: one version (most pages) or a version per card (the run page).
        headers = request.headers
        polled = "X-Smrweb-Version" in headers or "X-Smrweb-Cards" in headers
        return headers.get("HX-Request") == "true" and polled


class BatchedCacheWritesMiddleware:
    """A page or a poll of the dashboard (a safe request outside the API) writes what it keeps in the cache
    once (core.softcache's block): a live poll after a turn made ~10 writes. The writes are for later
    requests (the next poll, another tab), so they are made when the response is closed — once the WSGI
    server has sent it — and the viewer does not wait for them. The API's reads and every write request
    keep writing as they go (the write path's forgets are not held back)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in ("GET", "HEAD") or request.path.startswith("/api/"):
            return self.get_response(request)
        softcache.close_batch()  # one an earlier request on this thread left open (its response never closed)
        softcache.open_batch()
        try:
            response = self.get_response(request)
        except BaseException:
            softcache.close_batch()
            raise
        if response.streaming:  # closed when its reader is done, if ever: write now
            softcache.close_batch()
        return response


def _write_held_cache(**kwargs) -> None:
    """The request's held cache writes, at `request_finished`: sent by its response's close (the WSGI
    server's once the response is sent, the test client's), in the thread that served it."""
    softcache.close_batch()


request_finished.connect(_write_held_cache, dispatch_uid="smrweb-held-cache-writes")
