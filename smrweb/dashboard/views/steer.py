"""The run page's Steer card: a runtime message to the agent, Pause / Resume, and the run's steering
requests with how each went. The card sits outside the page's polled fragment (typing is never lost to a
poll); its status part polls itself while the run is live or a request is pending. Forms post with htmx
and get the card (a message) or its status part (pause, resume) back; without JavaScript they post and
come back to the page. Rules, roles and the audit live in `tracking.services.control`."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb import tasks
from smrweb.core import queue
from smrweb.dashboard import live
from smrweb.dashboard.access import run_for_user
from smrweb.tracking import services
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import ControlKind, Role, Run
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.capabilities import Action
from smrweb.tracking.services.control import MESSAGE_MAX, PENDING

CONTROLS_SHOWN = 10
CARD = "dashboard/partials/run_steer.html"
STATUS = CARD + "#steer-status"


def steer_page_context(request, run: Run, role: str | None) -> dict:
    """What the run page's Steer card needs (full renders only: polls of the page leave the card alone)."""
    if request.htmx:
        return {}
    return _context(run, role)


def status_context(run: Run, role: str | None) -> dict:
    """What the card's status part needs: the run page renders it as one of its live cards (views/runs.py),
    so the page's one poll keeps it current."""
    return _context(run, role)


def _context(run: Run, role: str | None, **extra) -> dict:
    reviewer = role is not None and Role.rank(role) >= Role.rank(Role.REVIEWER)
    controls = list(run.controls.select_related("requested_by")[:CONTROLS_SHOWN])
    pending = [c for c in controls if c.status in PENDING]
    lifecycle = next((c for c in pending if c.kind != ControlKind.MESSAGE), None)
    return {
        "project": run.project,
        "run": run,
        "can_steer": reviewer,
        "steer_refusal": capabilities.refusal(run.project, Action.STEER) if reviewer else "",
        "steer_effect": capabilities.effect(run.project.source, Action.STEER),
        "controls": controls,
        "lifecycle_pending": lifecycle,
        "steer_polls": not run.is_terminal or bool(pending),
        "steer_version": live.version(run.pk, run.updated.timestamp()),
        "message_max": MESSAGE_MAX,
        "message_max_text": f"{MESSAGE_MAX:,}",
        **extra,
    }


@require_safe
@login_required
@vary_on_headers("HX-Request")
def steer_status(request, slug: str, run_id: str):
    """The card's status part (Pause / Resume and the requests), polled while anything can change."""
    run = run_for_user(request, slug, run_id)
    if live.unchanged(request, live.version(run.pk, run.updated.timestamp())):
        return live.no_change()
    return render(request, STATUS, _context(run, run.project.role_of(request.user)))


@require_POST
@login_required
def steer_run(request, slug: str, run_id: str):
    """Ask for a message (`action=message`, `body`), a pause or a resume (reviewers and admins);
    recorded and audited, dispatched by a worker after the commit."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    kind = request.POST.get("action", "")
    body = request.POST.get("body", "") if kind == ControlKind.MESSAGE else ""
    error = notice = ""
    try:
        control = services.request_control(run, by=request.user, kind=kind, body=body)
    except TrackingError as exc:
        error = exc.message
    else:
        queued = queue.dispatch(tasks.dispatch_control, control.pk) if control.is_new else True
        notice = _notice(control, queued=queued)
    if not request.htmx:
        (messages.error if error else messages.success)(request, error or notice)
        return redirect(run.get_absolute_url() + "#run-steer")
    run.refresh_from_db()
    context = _context(
        run,
        run.project.role_of(request.user),
        steer_error=error,
        steer_notice=notice,
        draft=body if error else "",
        for_message=kind == ControlKind.MESSAGE,
    )
    return render(request, CARD if kind == ControlKind.MESSAGE else STATUS, context)


def _notice(control, *, queued: bool) -> str:
    what = {
        ControlKind.MESSAGE: "The message",
        ControlKind.PAUSE: "The pause",
        ControlKind.RESUME: "The resume",
    }[control.kind]
    if not control.is_new:
        at = timezone.localtime(control.created)  # the viewer's clock (dashboard.clock)
        return f"{what} asked at {at:%H:%M:%S} is still being sent; it was not asked twice."
    if not queued:
        return (
            f"{what} is recorded; the worker queue is unreachable right now, so it is sent once it is back."
        )
    return f"{what} is on its way to the run's source."
