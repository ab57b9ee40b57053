from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("smrweb.api.urls")),
    path("", include("smrweb.dashboard.urls")),
]

handler400 = "smrweb.dashboard.views.errors.bad_request"
handler403 = "smrweb.dashboard.views.errors.permission_denied"
handler404 = "smrweb.dashboard.views.errors.not_found"
handler500 = "smrweb.dashboard.views.errors.server_error"
