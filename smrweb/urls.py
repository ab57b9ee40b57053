from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from smrweb.api import opsmetrics, otlp
from smrweb.core.apidocs import ApiDocsView
from smrweb.dashboard import sso
from smrweb.dashboard.views import mlflow_links
from smrweb.dashboard.views.auth import (
    LoginView,
    PasswordChangeView,
    PasswordResetConfirmView,
    PasswordResetView,
    admin_login,
)

urlpatterns = [
    path("admin/login/", admin_login),  # before the admin's own: the same sign-in rate limits
    path("admin/", admin.site.urls),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Everyone can change their own password (red-team finding 15), and reset it by e-mail (issue 19).
    path("password/", PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("password/reset/", PasswordResetView.as_view(), name="password_reset"),
    path("password/reset/sent/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path(
        "password/reset/<uidb64>/<token>/", PasswordResetConfirmView.as_view(), name="password_reset_confirm"
    ),
    path(
        "password/reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"
    ),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("smrweb.api.urls")),
    *sso.urlpatterns(),  # single sign-on (docs/sso.md): none unless SMRWEB_OIDC_ISSUER is set
    # OTLP/HTTP's own path
    path("v1/traces", opsmetrics.counted_ingest("otlp")(otlp.Traces.as_view()), name="otlp-traces"),
    path("metrics", opsmetrics.metrics, name="metrics"),  # Prometheus (operators, not project members)
    # The links the MLflow client prints (…/mlflow/#/experiments/<id>/runs/<run id>): before MLflow's API,
    # whose catch-all answers every other path under /mlflow/.
    path("mlflow/", mlflow_links.mlflow_link, name="mlflow-link"),
    path("mlflow/runs/<str:run_id>", mlflow_links.mlflow_run, name="mlflow-run"),
    path("mlflow/experiments/<str:experiment_id>", mlflow_links.mlflow_experiment, name="mlflow-experiment"),
    path("mlflow/", include("smrweb.api.mlflow.urls")),  # MLflow's tracking API (docs/integrations.md)
    path("", include("smrweb.dashboard.urls")),
]

handler400 = "smrweb.handlers.bad_request"
handler403 = "smrweb.handlers.permission_denied"
handler404 = "smrweb.handlers.not_found"
handler500 = "smrweb.handlers.server_error"
