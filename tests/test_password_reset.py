"""Passwords: reset by e-mail for everyone (through a real SMTP server, the mailed link followed to a new
password), with the same answer whether or not an account has the address and a rate limit on asking;
changing one's own password signed in. Both are audited."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from email import message_from_string

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from smrweb.tracking.models import AuditEvent
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()
RESET = "/password/reset/"


def test_the_sign_in_page_offers_a_reset():
    page = Client().get("/login/").content.decode()
    assert 'href="/password/reset/">Forgot password?' in page


def test_a_reset_link_mailed_through_smtp_sets_a_new_password(smtp):
    dora = UserFactory(username="dora", email="Dora@Example.org")
    client = Client()
    assert "Reset your password" in client.get(RESET).content.decode()
    response = client.post(RESET, {"email": "dora@example.ORG"})
    assert response.status_code == 302 and response["Location"] == "/password/reset/sent/"
    [raw] = smtp.wait_for(1, timeout=10)
    msg = message_from_string(raw["data"])
    text = msg.get_payload(decode=True).decode()
    assert raw["to"] == ["Dora@Example.org"] and msg["Subject"] == "[smrweb] Reset your password"
    assert "password of dora" in text
    [link] = re.findall(r"https://smrweb\.example(/password/reset/\S+/)", text)

    form = client.get(link, follow=True)  # Django moves the token into the session and redirects
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    set_url = form.redirect_chain[-1][0]
    weak = client.post(set_url, {"new_password1": "dora", "new_password2": "dora"})
    assert weak.status_code == 200 and "too short" in weak.content.decode()
    new = "a-brand-new-secret-77"
    done = client.post(set_url, {"new_password1": new, "new_password2": new})
    assert done.status_code == 302 and done["Location"] == "/password/reset/done/"
    assert "Password set" in client.get(done["Location"]).content.decode()
    dora.refresh_from_db()
    assert dora.check_password(new) and Client().login(username="dora", password=new)
    assert AuditEvent.objects.get(verb="account.password_reset").actor == dora

    used = Client().get(link, follow=True)
    assert used.status_code == 200 and "This link does not work" in used.content.decode()


def test_an_unknown_address_gets_the_same_answer_and_no_mail(smtp):
    UserFactory(username="dora", email="dora@example.org")
    known = Client().post(RESET, {"email": "dora@example.org"})
    smtp.wait_for(1, timeout=10)
    unknown = Client().post(RESET, {"email": "nobody@example.org"})
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    done = Client().get(unknown["Location"]).content.decode()
    assert "If an account has that address" in done
    assert [m["to"] for m in smtp.messages] == [["dora@example.org"]]


def test_asking_too_often_is_refused_with_429_and_retry_after(settings, smtp):
    settings.SMRWEB_PASSWORD_RESET_RATE = "3/h"
    UserFactory(username="dora", email="dora@example.org")
    client = Client()
    for _ in range(3):
        assert client.post(RESET, {"email": "dora@example.org"}).status_code == 302
    limited = client.post(RESET, {"email": "dora@example.org"})
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    assert "You asked too often" in limited.content.decode()
    # Another client asking about the same address is limited too: nobody floods one mailbox.
    other = Client(REMOTE_ADDR="10.9.8.7").post(RESET, {"email": "DORA@example.org"})
    assert other.status_code == 429
    smtp.wait_for(3, timeout=10)
    assert len(smtp.messages) == 3


def test_a_signed_in_person_changes_their_password_and_it_is_audited(client):
    carol = UserFactory(username="carol")
    client.force_login(carol)
    new = "another-long-secret-31"
    response = client.post(
        "/password/",
        {"old_password": "pw-for-tests-only", "new_password1": new, "new_password2": new},
    )
    assert response.status_code == 302 and response["Location"] == "/password/done/"
    carol.refresh_from_db()
    assert carol.check_password(new)
    assert AuditEvent.objects.get(verb="account.password_changed").actor == carol
    wrong = client.post("/password/", {"old_password": "nope", "new_password1": new, "new_password2": new})
    assert (
        wrong.status_code == 200 and AuditEvent.objects.filter(verb="account.password_changed").count() == 1
    )


class SlowSmtp:
    """A real SMTP server that takes `delay` seconds to accept each message."""

    def __init__(self, delay: float):
        from aiosmtpd.controller import Controller

        self.delay, self.arrived = delay, threading.Event()
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                await asyncio.sleep(outer.delay)
                outer.arrived.set()
                return "250 OK"

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()


@pytest.mark.django_db(transaction=True)
def test_the_answer_does_not_wait_for_the_mail_server(live_server, settings):
    """A known address must not answer slower than an unknown one: the mail goes out after the answer."""
    slow = SlowSmtp(delay=1.5)
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", slow.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        UserFactory(username="dora", email="dora@example.org")
        with httpx.Client(base_url=live_server.url, follow_redirects=False, timeout=10) as http:
            form = http.get(RESET).text
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
            started = time.monotonic()
            answer = http.post(
                RESET,
                data={"email": "dora@example.org", "csrfmiddlewaretoken": token},
                headers={"Referer": live_server.url + RESET},
            )
            took = time.monotonic() - started
        assert answer.status_code == 302 and took < 1.0, took
        assert slow.arrived.wait(10)  # and the mail did go out
    finally:
        slow.controller.stop()
