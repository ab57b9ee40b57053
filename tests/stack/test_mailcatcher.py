"""The demo's mail catcher: a real SMTP server on loopback that keeps each message as a file, reached by
Django's SMTP backend configured the way runstack configures the children (EMAIL_URL)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import environ
import pytest
from django.core.mail import EmailMessage, get_connection

from smrweb.stack import console
from smrweb.stack.mailcatcher import MailCatcher, free_port
from smrweb.stack.management.commands import runstack


def use_email_url(settings, url: str) -> None:
    """What `settings.py` does with EMAIL_URL, applied to the test's settings."""
    for name, value in environ.Env.email_url_config(url).items():
        setattr(settings, name, value)


@pytest.fixture
def catcher(tmp_path):
    with MailCatcher(tmp_path / "mail", port=free_port(preferred=0)) as running:
        yield running


def test_a_message_sent_with_djangos_smtp_backend_is_kept_as_a_file(catcher, settings):
    use_email_url(settings, catcher.url)
    assert settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
    with get_connection(timeout=5) as connection:
        sent = connection.send_messages(
            [
                EmailMessage(
                    "[smrweb] hill: run r1 failed (oom) — ünïcode",
                    "r1 failed.\n\nhttp://127.0.0.1:8000/projects/hill/runs/r1/",
                    "smrweb <smrweb@localhost>",
                    ["demo@localhost"],
                    headers={"X-Smrweb-Trigger": "run.failed"},
                ),
                EmailMessage("second", "two", "smrweb@localhost", ["a@example.com", "b@example.com"]),
            ]
        )
    assert sent == 2 and catcher.count == 2
    files = sorted(catcher.directory.glob("*.eml"))
    assert [f.name.rsplit("-", 1)[1] for f in files] == ["1.eml", "2.eml"]
    first = files[0].read_bytes()
    assert b"To: demo@localhost" in first and b"X-Smrweb-Trigger: run.failed" in first
    assert b"/projects/hill/runs/r1/" in first
    news = catcher.news()
    assert [(m.recipients, m.trigger) for m in news] == [
        (["demo@localhost"], "run.failed"),
        (["a@example.com", "b@example.com"], ""),
    ]
    assert news[0].subject == "[smrweb] hill: run r1 failed (oom) — ünïcode"
    assert catcher.news() == []  # each once


def test_the_preferred_port_when_free_else_another():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        other = free_port(preferred=busy)
        assert other != busy and other > 0
    assert free_port(preferred=busy) == busy  # free again


def test_runstack_points_the_children_at_the_catcher_and_names_it_in_the_banner(
    settings, tmp_path, monkeypatch
):
    settings.DATA_DIR = tmp_path / "demo"
    monkeypatch.delenv("EMAIL_URL", raising=False)
    monkeypatch.delenv("SMRWEB_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    mail = runstack.start_demo_mail()
    try:
        assert mail.directory == tmp_path / "demo" / "mail" and mail.directory.is_dir()
        assert runstack.os.environ["EMAIL_URL"] == f"smtp://127.0.0.1:{mail.port}"
        assert runstack.mail_banner(mail) == f"mail catcher: smtp://127.0.0.1:{mail.port} → demo/mail/"
        use_email_url(settings, runstack.os.environ["EMAIL_URL"])
        EmailMessage("hello", "body", "smrweb@localhost", ["demo@localhost"]).send()
        assert mail.count == 1
    finally:
        mail.stop()
    runstack.use_base_url("http://127.0.0.1:8123")
    assert runstack.os.environ["SMRWEB_BASE_URL"] == settings.SMRWEB_BASE_URL == "http://127.0.0.1:8123"
    # An operator's own settings win.
    monkeypatch.setenv("EMAIL_URL", "smtp://mail.example.com:587")
    assert runstack.start_demo_mail() is None and "environment" in runstack.mail_banner(None)
    monkeypatch.setenv("SMRWEB_BASE_URL", "https://smrweb.example.com/")
    runstack.use_base_url("http://127.0.0.1:8123")
    assert settings.SMRWEB_BASE_URL == "https://smrweb.example.com"


def test_the_console_shows_alert_mail_and_sums_up_the_routine_ones():
    feed = console.MailFeed(every=60)
    mail = [
        SimpleNamespace(recipients=["demo@localhost"], subject="[smrweb] r1 failed", trigger="run.failed"),
        *(
            SimpleNamespace(recipients=["demo@localhost"], subject=f"[smrweb] #{i} verified", trigger=t)
            for i, t in enumerate(["submission.needs_review"] * 3)
        ),
    ]
    lines = list(feed.lines(mail, now=0))
    assert len(lines) == 1 and lines[0].endswith("mail to demo@localhost: [smrweb] r1 failed")
    [summary] = feed.lines([], now=feed.next_summary)
    assert summary.endswith(
        "mail to demo@localhost: 3 × submission.needs_review (latest: [smrweb] #2 verified)"
    )
    assert list(feed.lines([], now=feed.next_summary)) == []
