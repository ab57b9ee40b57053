from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from smrweb.api import opsmetrics, otlp
from smrweb.core.apidocs import ApiDocsView
from smrweb.dashboard.views.auth import LoginView, admin_login

urlpatterns = [
    path("admin/login/", admin_login),  # before the admin's own: the same sign-in rate limits
    path("admin/", admin.site.urls),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Everyone can change their own password (red-team finding 15); resetting one by email is issue 19's.
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("smrweb.api.urls")),
    # OTLP/HTTP's own path
    path("v1/traces", opsmetrics.counted_ingest("otlp")(otlp.Traces.as_view()), name="otlp-traces"),
    path("metrics", opsmetrics.metrics, name="metrics"),  # Prometheus (operators, not project members)
    path("mlflow/", include("smrweb.api.mlflow.urls")),  # MLflow's tracking API (docs/integrations.md)
    path("", include("smrweb.dashboard.urls")),
]

handler400 = "smrweb.handlers.bad_request"
handler403 = "smrweb.handlers.permission_denied"
handler404 = "smrweb.handlers.not_found"
handler500 = "smrweb.handlers.server_error"
