"""Sign-in, rate-limited per client address and per username (SMRWEB_LOGIN_RATE, default 10 a minute).

Both sign-in forms — the site's and the admin's — count against the same limits. An attempt over the
limit is not checked at all: it gets the sign-in form back with the reason, 429 Too Many Requests and
Retry-After, whether or not the password was right."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import render
from django.utils.cache import add_never_cache_headers

from smrweb.core import ratelimits


def login_limited(request) -> ratelimits.Limited | None:
    """Count one sign-in attempt; a Limited when its address or its username is over the limit."""
    return ratelimits.hit(request, group="login", rate=settings.SMRWEB_LOGIN_RATE,
                          keys=(ratelimits.by_ip, ratelimits.by_username))


def too_many_attempts(request, limited: ratelimits.Limited):
    form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")[:150]})
    response = render(request, "registration/login.html",
                      {"form": form, "rate_limited": limited.message, "next": request.POST.get("next", "")},
                      status=429)
    response["Retry-After"] = str(limited.retry_after)
    add_never_cache_headers(response)
    return response


class LoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if limited := login_limited(request):
            return too_many_attempts(request, limited)
        return super().post(request, *args, **kwargs)


def admin_login(request, extra_context=None):
    """The admin's sign-in, behind the same limits (a limited attempt gets the site's sign-in page)."""
    if request.method == "POST" and (limited := login_limited(request)):
        return too_many_attempts(request, limited)
    return admin.site.login(request, extra_context)
