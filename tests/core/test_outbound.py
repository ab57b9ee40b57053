"""The outbound guard (red-team findings 2 and 6): every address the review stored as a rollback webhook
is refused when saved and again when sent; the review's SSRF reproduction (a loopback "internal service"
whose secret came back on the run page) now reaches nothing; an allowed receiver never sees its answer
shown back; one DNS answer is used; no redirects, no environment proxies; a hostile Retry-After is
capped and the attempts stop at the maximum."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from smrweb.core import outbound
from smrweb.outbound import dispatch, http
from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Rollback, SourceHealth, SourceKind
from smrweb.tracking.services import dispatched, rollbacks
from tests.conftest import wait_for

SECRET = "INTERNAL-ONLY-SECRET-4711"


class Service:
    """A stand-in internal service on loopback that logs every request and answers from a script."""

    def __init__(self, answers: list[tuple[int, dict[str, str], bytes]] | None = None):
        self.requests: list[str] = []
        self.answers = list(answers or [])
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                service.requests.append(self.path)
                status, headers, body = (
                    service.answers.pop(0)
                    if service.answers
                    else (200, {}, json.dumps({"internal": SECRET}).encode())
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/internal/admin?x=1"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    started = Service()
    yield started
    started.stop()


@pytest.fixture
def guard_on(settings):
    """The guard as an operator gets it by default: no allow-list, private addresses refused."""
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = []
    settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS = False


# Every address the review got stored (and the numeric forms it tried), refused when saved.
REVIEW_URLS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://10.0.0.5:8080/admin",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://[fd00::1]/",
    "http://metadata.google.internal/computeMetadata/v1/",  # does not resolve here: refused all the same
    "http://localhost:6379/",
    "http://[::1]:8799/",
    "http://[::ffff:127.0.0.1]:8799/",
    "http://user:pw@127.0.0.1:8799/",
    "http://0.0.0.0:8799/",
    "https://127.0.0.1:8799/x",  # what the settings form makes of "127.0.0.1:8799/x"
    "http://127.1:8799/",
    "http://2130706433:8799/",
    "http://0x7f000001:8799/",
    "http://100.64.0.1/",  # CGNAT
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "ftp://x.example/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_",
    "javascript:alert(1)",
]


@pytest.mark.parametrize("url", REVIEW_URLS)
def test_every_address_the_review_stored_is_refused_when_saved(project, alice, guard_on, url):
    with pytest.raises(InvalidInput) as refused:
        services.update_project(project, rollback_webhook_url=url, by=alice)
    assert refused.value.field == "rollback_webhook_url"
    project.refresh_from_db()
    assert project.rollback_webhook_url == ""


def test_the_settings_page_says_why_as_a_form_error(client, alice, project, guard_on):
    client.force_login(alice)
    response = client.post(
        "/projects/hill/settings/", {"rollback_webhook_url": "http://169.254.169.254/latest/"}
    )
    assert response.status_code == 400
    assert (
        "169.254.169.254 is a link-local address: smrweb sends only to public addresses"
        in response.content.decode()
    )


def test_a_refusal_never_tells_what_a_name_resolves_to(project, alice, guard_on, caplog):
    """Finding N9: `localhost (127.0.0.1) is a loopback address` told whoever may save a webhook the
    internal DNS. A name that resolves privately and one that does not resolve read the same; only an
    address typed as such is named with its kind. The details go to the operator's log."""
    answers = {}
    for url in ("http://localhost:8120/", "http://no-such-host.invalid/", "http://127.0.0.1:8120/"):
        with pytest.raises(InvalidInput) as refused:
            services.update_project(project, rollback_webhook_url=url, by=alice)
        answers[url] = refused.value.message
    internal, unknown, literal = answers.values()
    assert "127.0.0.1" not in internal and "::1" not in internal and "loopback" not in internal
    assert internal.replace("localhost", "X") == unknown.replace("no-such-host.invalid", "X")
    assert literal.startswith("127.0.0.1 is a loopback address")  # the user typed the address
    assert any("localhost" in r.message and "loopback" in r.message for r in caplog.records)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2001:4860:4860::8888", "2606:4700::1111"])
def test_public_addresses_pass(address):
    import ipaddress

    assert outbound.why_not_public(ipaddress.ip_address(address)) is None


def _rollback_for(project, bob, url: str) -> Rollback:
    from smrweb.tracking.events import parse_events

    project.rollback_webhook_url = url  # as stored before this fix (or a name whose address changed since)
    project.save()
    services.ingest_events(
        project, "r1", parse_events(b'[{"id": "cp1", "type": "checkpoint", "label": "x"}]')
    )
    checkpoint = project.runs.get().checkpoints.get()
    return rollbacks.request_rollback(by=bob, reason="r", checkpoint=checkpoint).rollback


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_reviews_ssrf_reaches_nothing_through_the_worker(bob, project, service, celery_worker):
    """The reproduction: a webhook pointed at an internal service. `localhost` is not on the suite's
    allow-list (the worker has 127.0.0.1 only), so the worker refuses to send, and nothing comes back."""
    from smrweb.tasks import dispatch_rollback

    rollback = _rollback_for(project, bob, service.url("localhost"))
    dispatch_rollback.delay(rollback.pk)
    wait_for(lambda: Rollback.objects.get(pk=rollback.pk).status == "failed")
    rollback.refresh_from_db()
    assert service.requests == []
    assert "not sent: The host localhost does not resolve to a public address" in rollback.detail
    assert "127.0.0.1" not in rollback.detail and "::1" not in rollback.detail  # finding N9
    assert rollback.attempts == 1 and "giving up" in rollback.detail  # a refusal is not retried


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_allowed_receiver_is_reached_and_its_answer_is_never_shown(
    client, bob, project, service, celery_worker
):
    from smrweb.tasks import dispatch_rollback

    rollback = _rollback_for(project, bob, service.url())  # 127.0.0.1: on the operator's list
    dispatch_rollback.delay(rollback.pk)
    wait_for(lambda: Rollback.objects.get(pk=rollback.pk).status == "applied")
    rollback.refresh_from_db()
    assert service.requests == ["/internal/admin?x=1"]
    assert rollback.detail.endswith("] attempt 1: the webhook answered HTTP 200")
    client.force_login(bob)
    assert SECRET not in client.get("/projects/hill/runs/r1/").content.decode()
    assert SECRET not in client.get("/api/v1/projects/hill/runs/r1/rollbacks").content.decode()


def test_one_dns_answer_is_used_for_the_check_and_the_connection(service, settings, monkeypatch):
    """DNS rebinding: the name answers the receiver first and a private address after. The guard looks
    it up once and connects to what it checked."""
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = []
    settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS = True  # so that the receiver on loopback counts as "public" here
    real = socket.getaddrinfo
    lookups = []

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "203.0.113.9"  # TEST-NET-3: nothing answers there
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    answer = outbound.post(f"http://rebind.test:{service.port}/hook", content=b"{}", headers={}, timeout=5)
    assert answer.status == 200 and service.requests == ["/hook"] and lookups == ["rebind.test"]


def test_redirects_are_not_followed_and_environment_proxies_are_ignored(service, monkeypatch):
    service.answers = [(307, {"Location": "http://127.0.0.1:1/elsewhere"}, b"")]
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")  # a proxy that does not exist
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:1")
    answer = outbound.post(service.url(), content=b"{}", headers={}, timeout=5)
    assert answer.status == 307 and service.requests == ["/internal/admin?x=1"]


def test_a_huge_answer_is_read_only_up_to_the_cap(service, settings):
    settings.SMRWEB_OUTBOUND_MAX_RESPONSE_BYTES = 1024
    service.answers = [(500, {}, b"x" * (32 * 1024 * 1024))]
    assert outbound.post(service.url(), content=b"{}", headers={}, timeout=5).status == 500


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("inf", None),
        ("Infinity", None),
        ("nan", None),
        ("1e12", None),
        ("-5", None),
        ("soon", None),
        ("", None),
        ("7", 7.0),
        ("999999999999999999999", 999999999999.0),
    ],
)
def test_retry_after_is_read_safely(header, seconds):
    assert http.retry_after(header) == seconds


@pytest.mark.parametrize("hint", [float("inf"), float("nan"), 1e12, -5.0, None, 999999999999.0])
def test_the_backoff_never_exceeds_its_cap_whatever_the_hint(hint, settings):
    settings.SMRWEB_DISPATCH_RETRY_MAX_SECONDS = 300
    for attempt in (1, 5, 1000):
        assert 0 < dispatch.backoff(attempt, hint) <= 300


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("retry_after", ["inf", "1e12", "999999999999"])
def test_a_hostile_retry_after_neither_wedges_nor_outlives_the_maximum(
    bob, project, retry_after, celery_worker
):
    """The review's `/r429inf` and `/r429big`: the rollback is retried with a capped delay, and fails
    clearly after SMRWEB_ROLLBACK_MAX_ATTEMPTS (4 for the suite's worker), instead of staying dispatched."""
    from smrweb.tasks import dispatch_rollback

    hostile = Service([(429, {"Retry-After": retry_after}, b"slow down")] * 10)
    try:
        rollback = _rollback_for(project, bob, hostile.url())
        dispatch_rollback.delay(rollback.pk)
        wait_for(lambda: Rollback.objects.get(pk=rollback.pk).status == "failed", timeout=60)
    finally:
        hostile.stop()
    rollback.refresh_from_db()
    assert rollback.attempts == 4 and len(hostile.requests) == 4
    assert "attempt 4: the webhook answered HTTP 429; giving up" in rollback.detail
    assert "inf" not in rollback.detail and "1e+12" not in rollback.detail


def test_a_copy_queued_again_after_the_last_attempt_gives_up_instead_of_sending(
    bob, project, service, settings
):
    """The stale-action sweep queues a new task (Celery's retry count starts again at 0): the attempts
    counted on the rollback stop it."""
    settings.SMRWEB_DISPATCH_MAX_ATTEMPTS = 2
    rollback = _rollback_for(project, bob, service.url())
    Rollback.objects.filter(pk=rollback.pk).update(status="dispatched", attempts=2)
    assert dispatch.dispatch_rollback(rollback.pk).outcome == "failed"
    rollback.refresh_from_db()
    assert rollback.status == "failed" and "gave up after 2 attempts" in rollback.detail
    assert service.requests == []


def test_a_projects_own_smr_backend_goes_through_the_guard(db, start_sim, guard_on):
    """A per-project backend address pointing at loopback (the simulator) is not called at all."""
    sim = start_sim(api_key="k", project_ids=["p"], runs=1, tick=0.1)
    with pytest.raises(InvalidInput) as refused:  # refused when set...
        services.create_project(
            "smr", source=SourceKind.SMR, smr_project_id="p", smr_api_key="k", smr_backend_base=sim.url
        )
    assert refused.value.field == "smr_backend_base"
    bound = services.create_project("smr", source=SourceKind.SMR, smr_project_id="p", smr_api_key="k")
    bound.source_settings = {**bound.source_settings, "backend_base": sim.url}  # ...and when sent
    bound.save()
    before = sum(sim.stats.requests.values())
    assert sync.sync_project(bound, owner="test").synced == 0
    assert sum(sim.stats.requests.values()) == before
    health = SourceHealth.objects.get(project=bound)
    assert health.last_error_kind == "blocked" and "is a loopback address" in health.last_error


def test_a_rollback_detail_holding_nul_is_recorded(bob, project, service):
    """A source's words with NUL (git's stderr from a broken pack) in a rollback's detail and audit."""
    from smrweb.tracking.models import AuditEvent

    rollback = _rollback_for(project, bob, service.url())
    dispatched.start_attempt(Rollback, rollback.pk)
    dispatched.note_attempt(Rollback, rollback.pk, "git: bad pack header\x00 retrying")
    rollbacks.finish(rollback.pk, ok=False, detail="git: bad pack header\x00 giving up")
    rollback.refresh_from_db()
    assert "\x00" not in rollback.detail and "bad pack header\ufffd giving up" in rollback.detail
    assert AuditEvent.objects.filter(verb="rollback.failed", object_id=str(rollback.pk)).exists()
