"""The API docs page (Swagger UI from drf-spectacular-sidecar) under the site's strict CSP.

drf-spectacular's split view serves Swagger UI's start-up code as a script of its own (`?script`)
instead of inline, so `script-src 'self'` holds. That script carries the CSRF token for "Try it out",
so it is never cached and never handed to another origin's page (Cross-Origin-Resource-Policy)."""

from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerSplitView


class ApiDocsView(SpectacularSwaggerSplitView):
    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        if request.GET.get("script") is not None:
            response["Cross-Origin-Resource-Policy"] = "same-origin"
            add_never_cache_headers(response)
        return response
