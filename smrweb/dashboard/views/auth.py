"""Sign-in, rate-limited so that guessing is slow and nobody can lock a chosen account out (finding 13).

Both sign-in forms — the site's and the admin's — go through `guarded_sign_in`:
- every attempt from one client address counts (SMRWEB_LOGIN_RATE, default 10 a minute);
- wrong passwords for one username from one address count (the same rate): that client stops guessing it;
- wrong passwords for one username from anywhere count too (SMRWEB_LOGIN_USERNAME_RATE, default 30 an
  hour); past that the account is under attack, and only clients that have not failed on it may try. So
  a stranger's failures never refuse the owner's right password from the owner's own client, and a guesser
  gets at most one try per address while the attack lasts.
An attempt over a limit is not checked at all: it gets the sign-in form back with the reason, 429 Too Many
Requests and Retry-After, whether or not the password was right."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm
from django.shortcuts import render
from django.utils.cache import add_never_cache_headers

from smrweb.core import ratelimits
from smrweb.tracking import services


def by_username_and_ip(group: str, request) -> str:
    return f"{ratelimits.by_username(group, request)}|{ratelimits.client_ip(request)}"


def login_limited(request) -> ratelimits.Limited | None:
    """Count the attempt against its address; a Limited when the address, or this client's failures on
    this username, or (for a client that has failed on it) the username's failures are over the limit."""
    if limited := ratelimits.hit(
        request, group="login", rate=settings.SMRWEB_LOGIN_RATE, keys=(ratelimits.by_ip,)
    ):
        return limited
    if limited := ratelimits.peek(
        request, group="login-failed", rate=settings.SMRWEB_LOGIN_RATE, key=by_username_and_ip
    ):
        return limited
    attacked = ratelimits.peek(
        request,
        group="login-failed-anywhere",
        rate=settings.SMRWEB_LOGIN_USERNAME_RATE,
        key=ratelimits.by_username,
    )
    if attacked and ratelimits.count(
        request, group="login-failed", rate=settings.SMRWEB_LOGIN_RATE, key=by_username_and_ip
    ):
        return attacked
    return None


def count_failure(request) -> None:
    ratelimits.hit(request, group="login-failed", rate=settings.SMRWEB_LOGIN_RATE, keys=(by_username_and_ip,))
    ratelimits.hit(
        request,
        group="login-failed-anywhere",
        rate=settings.SMRWEB_LOGIN_USERNAME_RATE,
        keys=(ratelimits.by_username,),
    )


def guarded_sign_in(request, sign_in):
    """Run `sign_in(request)` (a view answering 302 on success) behind the limits; count its failures."""
    if limited := login_limited(request):
        return too_many_attempts(request, limited)
    response = sign_in(request)
    if response.status_code != 302:  # the form came back: the password (or the username) was wrong
        count_failure(request)
    return response


def sso_label() -> str:
    """The "Sign in with …" button's label (docs/sso.md), or "" while single sign-on is off."""
    return settings.SMRWEB_OIDC_BUTTON_LABEL if settings.SMRWEB_OIDC_ISSUER else ""


def too_many_attempts(request, limited: ratelimits.Limited):
    form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")[:150]})
    response = render(
        request,
        "registration/login.html",
        {"form": form, "rate_limited": limited.message, "next": request.POST.get("next", "")},
        status=429,
    )
    response["Retry-After"] = str(limited.retry_after)
    add_never_cache_headers(response)
    return response


class LoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs, sso_label=sso_label())

    def post(self, request, *args, **kwargs):
        return guarded_sign_in(request, lambda req: super(LoginView, self).post(req, *args, **kwargs))


def admin_login(request, extra_context=None):
    """The admin's sign-in, behind the same limits (a limited attempt gets the site's sign-in page)."""
    if request.method == "POST":
        return guarded_sign_in(request, lambda req: admin.site.login(req, extra_context))
    return admin.site.login(request, extra_context)


# --- passwords: change (signed in) and reset by e-mail (everyone) ------------------------------------------


def by_email(group: str, request) -> str:
    return request.POST.get("email", "").strip().casefold()


class PasswordChangeView(auth_views.PasswordChangeView):
    def form_valid(self, form):
        response = super().form_valid(form)
        services.password_changed(form.user, how="changed")
        return response


class DeferredPasswordResetForm(PasswordResetForm):
    """Django's form, but the e-mail is sent after the answer (see PasswordResetView.form_valid)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.deferred: list = []

    def send_mail(self, *args, **kwargs):
        self.deferred.append(lambda: PasswordResetForm.send_mail(self, *args, **kwargs))


class PasswordResetView(auth_views.PasswordResetView):
    """The same answer whether or not an account has the address (Django's), in the same time: the mail
    goes out once the answer is sent, so a slow mail server does not tell a known address from an
    unknown one. Requests are limited per client address and per address asked about
    (SMRWEB_PASSWORD_RESET_RATE), so nobody can flood a mailbox or probe at speed. The link is absolute
    under SMRWEB_BASE_URL, not the request's Host."""

    email_template_name = "registration/password_reset_email.txt"
    form_class = DeferredPasswordResetForm

    def post(self, request, *args, **kwargs):
        rate = settings.SMRWEB_PASSWORD_RESET_RATE
        limited = ratelimits.hit(request, group="password-reset", rate=rate, keys=(ratelimits.by_ip,))
        if not limited and request.POST.get("email", "").strip():
            limited = ratelimits.hit(request, group="password-reset-email", rate=rate, keys=(by_email,))
        if limited:
            form = self.get_form()
            form.is_valid()
            form.add_error(None, f"You asked too often. {limited.message}")
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(limited.retry_after)
            add_never_cache_headers(response)
            return response
        return super().post(request, *args, **kwargs)

    def form_valid(self, form):
        self.extra_email_context = {
            "base_url": settings.SMRWEB_BASE_URL,
            "timeout_days": max(1, settings.PASSWORD_RESET_TIMEOUT // 86400),
        }
        response = super().form_valid(form)
        # The WSGI server closes a response after writing it; its closers run then (Django's own hook
        # for releasing resources; the test client closes responses too). Sending fails quietly, logged.
        response._resource_closers.extend(form.deferred)
        return response


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    def form_valid(self, form):
        response = super().form_valid(form)
        services.password_changed(form.user, how="reset")
        return response
