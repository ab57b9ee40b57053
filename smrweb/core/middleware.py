"""Refuse NUL characters in the path or query string up front: PostgreSQL cannot compare text with
U+0000, so such a lookup would fail deep in a query instead of answering 400/404."""

from django.http import HttpResponseBadRequest, JsonResponse


class RejectNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any("\x00" in v for values in request.GET.lists() for v in values[1] + [values[0]]):
            message = "The URL must not contain the NUL character (%00)."
            if request.path.startswith("/api/"):
                return JsonResponse({"code": "bad_request", "message": message, "errors": []}, status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)
