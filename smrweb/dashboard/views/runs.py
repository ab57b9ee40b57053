"""The run page, its polled partials (turn details, metric charts) and artifact downloads."""

from datetime import UTC, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST, require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.core import queue
from smrweb.dashboard import charts, live
from smrweb.dashboard.access import fragment_template, run_for_user
from smrweb.dashboard.artifacts import artifact_response, missing_bytes_page
from smrweb.dashboard.views.annotations import run_page_context
from smrweb.dashboard.views.steer import steer_page_context
from smrweb.sources import tasks
from smrweb.tracking import queries, services
from smrweb.tracking.errors import ArtifactBytesMissing, InvalidInput, TrackingError
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    Checkpoint,
    Role,
    Rollback,
    SourceKind,
    Submission,
    TurnKind,
)
from smrweb.tracking.queries import alerts as alert_queries
from smrweb.tracking.queries import timeline
from smrweb.tracking.services import launches, rollbacks, submissions

TURNS_PER_PAGE = 25
ARTIFACTS_PER_PAGE = 10
RECENT_EXPERIMENTS = 10
METRIC_POINTS = 1000


def _run_version(run) -> str:
    return live.version(run.pk, run.updated.timestamp())


@require_safe
@login_required
@vary_on_headers("HX-Request")
def run_detail(request, slug: str, run_id: str):
    run = run_for_user(request, slug, run_id)
    version = live.version(_run_version(run), request.GET.urlencode())
    if live.unchanged(request, version):
        return live.no_change()
    now = timezone.now()
    scenario = run.project.scenario
    tl = timeline.run_timeline(run, now=now)
    burn = timeline.burn_forecast(run, now=now)
    actors = timeline.actor_tree(run)
    keys = queries.metric_keys(run)
    role = run.project.role_of(request.user)  # read once for the admin card and the snooze form
    rank = Role.rank(role) if role else -1
    context = {
        "project": run.project,
        "run": run,
        "version": version,
        "timeline": tl,
        "timeline_figure": charts.run_timeline_figure(
            tl,
            maximize=scenario.maximize,
            metric=scenario.score_metric,
            budget_usd=run.budget_usd,
            burn=burn,
            now=now,
            uirevision=f"run-{run.pk}",
        ),
        "burn": burn,
        "efficiency": timeline.efficiency(run),
        "actors": actors if len(actors) > 1 else [],
        "overruns": run.budget_overruns,
        "turns_page": (
            turns_page := Paginator(run.turns.order_by("-ts", "-id"), TURNS_PER_PAGE).get_page(
                request.GET.get("turns_page")
            )
        ),
        "turns": list(turns_page),
        "experiments": run.experiments.select_related("parent").order_by("-created", "-id")[
            :RECENT_EXPERIMENTS
        ],
        "experiment_count": run.experiments.count(),
        "submissions": run.submissions.select_related("artifact__blob").order_by("-ts", "-id")[:20],
        "artifacts_page": (
            artifacts_page := Paginator(
                run.artifacts.select_related("blob").order_by("-created", "-id"), ARTIFACTS_PER_PAGE
            ).get_page(request.GET.get("artifacts_page"))
        ),
        "artifacts": list(artifacts_page),
        "artifact_count": artifacts_page.paginator.count,
        "page_query": {key: _without(request.GET, key) for key in ("turns_page", "artifacts_page")},
        "poll_query": request.GET.urlencode(),  # the poll keeps the pages being looked at
        "checkpoints": run.checkpoints.order_by("-ts", "-id")[:20],
        **_runtime_messages(run),
        "state_changes": run.state_changes.order_by("-ts", "-id")[:20],
        "stalled_for": queries.stalled_for(run, now),
        "gaps": queries.source_gaps(run),
        "can_stop": run.project.source == SourceKind.SMR and run.project.allows(request.user, Role.REVIEWER),
        "can_roll_back": rollbacks.may_roll_back(request.user, run.project),
        "is_admin": rank >= Role.rank(Role.ADMIN),
        "can_snooze": rank >= Role.rank(Role.REVIEWER),
        "can_launch": rank >= Role.rank(Role.REVIEWER) and not launches.launch_refusal(run.project),
        "can_close": rank >= Role.rank(Role.REVIEWER) and not services.close_refusal(run, now),
        "run_alerts": alert_queries.run_alerts(run, now),
        "regressions": queries.regressions(run.project, [run]),
        "rollbacks": (
            rollback_list := list(
                run.rollbacks.select_related("target_submission", "target_checkpoint", "requested_by")[:10]
            )
        ),
        # A finished run's page keeps polling while a rollback of it is in flight, to show its progress.
        "rollback_in_flight": any(r.status in Rollback.OPEN for r in rollback_list),
        "metric_keys": keys,
        **(_metric_context(run, keys[0]) if keys and not request.htmx else {}),
        **run_page_context(request, run, role),  # name, pin, tags, note, comments
        **steer_page_context(request, run, role),  # the Steer card: message, pause, resume
    }
    return render(request, fragment_template(request, "dashboard/run_detail.html", "run-live"), context)


def _without(params, key: str) -> str:
    """The query string minus one parameter (pager links set it again)."""
    params = params.copy()
    params.pop(key, None)
    return params.urlencode()


def _runtime_messages(run, limit: int = 20) -> dict:
    """The latest messages, newest first, and always the kickoff (the run's first message) last."""
    latest = list(run.messages.order_by("-seq")[:limit])  # not "messages": that is Django's flash messages
    kickoff = (
        run.messages.order_by("seq").first() if len(latest) == limit else (latest[-1] if latest else None)
    )
    if kickoff is not None and kickoff not in latest:
        latest.append(kickoff)
    return {"runtime_messages": latest, "kickoff_seq": kickoff.seq if kickoff else None}


def _metric_context(run, key: str) -> dict:
    total, points = queries.metric_series(run, key, METRIC_POINTS)
    return {
        "metric_key": key,
        "metric_total": total,
        "metric_shown": len(points),
        "metric_figure": charts.metric_figure(key, points, total=total, uirevision=f"metric-{run.pk}-{key}"),
    }


@require_safe
@login_required
def run_metric(request, slug: str, run_id: str):
    """The metric chart panel for one key (the key picker swaps it; it polls itself while the run lives)."""
    run = run_for_user(request, slug, run_id)
    keys = queries.metric_keys(run)
    key = request.GET.get("key", "")
    if key not in keys:
        return render(
            request,
            "dashboard/run_detail.html#metric-panel",
            {"project": run.project, "run": run, "metric_keys": keys, "metric_error": key},
            status=404,
        )
    version = live.version(_run_version(run), key)
    if live.unchanged(request, version):
        return live.no_change()
    context = {
        "project": run.project,
        "run": run,
        "metric_keys": keys,
        "metric_version": version,
        **_metric_context(run, key),
    }
    return render(request, "dashboard/run_detail.html#metric-panel", context)


@require_safe
@login_required
def turn_detail(request, slug: str, run_id: str, turn_id: int):
    run = run_for_user(request, slug, run_id)
    turn = get_object_or_404(AgentTurn, run=run, pk=turn_id)
    return render(
        request,
        "dashboard/partials/turns_panel.html",
        {"project": run.project, "run": run, "turns": [turn], "count": 1},
    )


MAX_BAR_WIDTH = timedelta(days=366)  # a timeline bar is at most a year wide, whatever the run's span
MAX_BAR_INDEX = 10_000_000


def _bar(query) -> tuple | None:
    """(origin, width, index, start, end) of a bar's query parameters, or None when they do not name a bar
    a timeline could draw: malformed, out of range, or beyond the calendar (red-team finding 8 found each
    of those answering 500)."""
    try:
        origin = parse_datetime(query.get("origin", ""))
        width = timedelta(microseconds=int(query.get("width_us", "")))
        index = int(query.get("bin", ""))
        if origin is None or not timedelta(0) < width <= MAX_BAR_WIDTH or not 0 <= index <= MAX_BAR_INDEX:
            return None
        start = origin + width * index
        end = start + width
        for moment in (origin, start - timedelta(seconds=1), end + timedelta(seconds=1)):  # what is queried
            moment.astimezone(UTC)  # within the calendar in UTC too (year 1 at +14:00 is not)
    except (ValueError, OverflowError, TypeError):
        return None
    return origin, width, index, start, end


@require_safe
@login_required
def turns_in_bar(request, slug: str, run_id: str):
    """The turns behind one bar of the timeline: bin `bin` of width `width_us` from `origin`, one kind."""
    run = run_for_user(request, slug, run_id)
    bar = _bar(request.GET)
    if bar is None:
        return render(
            request,
            "dashboard/partials/turns_panel.html",
            {"project": run.project, "run": run, "error": "That bar could not be read; click it again."},
            status=400,
        )
    origin, width, index, start, end = bar
    kind = {"d": TurnKind.DRIVER_INFERENCE, "c": TurnKind.CHILD_WORK}.get(request.GET.get("kind", ""))
    turns, count = timeline.turns_in_bin(run, origin, width, index, kind)
    return render(
        request,
        "dashboard/partials/turns_panel.html",
        {
            "project": run.project,
            "run": run,
            "turns": turns,
            "count": count,
            "start": start,
            "end": end,
            "kind": kind,
        },
    )


@require_safe
@login_required
def download_artifact(request, slug: str, run_id: str, artifact_id: int):
    run = run_for_user(request, slug, run_id)
    artifact = get_object_or_404(Artifact.objects.select_related("blob"), run=run, pk=artifact_id)
    try:
        return artifact_response(artifact)
    except ArtifactBytesMissing as exc:
        return missing_bytes_page(request, exc)


@require_POST
@login_required
def stop_run(request, slug: str, run_id: str):
    """Ask the run's source to stop it (reviewers and admins); audited, dispatched after commit."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    try:
        services.request_stop(run, by=request.user)
    except TrackingError as exc:
        messages.error(request, exc.message)
    else:
        if queue.dispatch(tasks.stop_run, run.pk):
            messages.success(request, f"Asked the source to stop {run.external_id}.")
        else:  # nothing re-queues a stop later: say so instead of pretending (and instead of a 500)
            messages.error(
                request,
                "The task queue cannot be reached right now, so the stop was not sent; "
                "try again in a minute.",
            )
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def close_run(request, slug: str, run_id: str):
    """Close a silent push or git run as abandoned, with the reason why (reviewers and admins; audited)."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    try:
        services.close_run(run, by=request.user, reason=request.POST.get("reason", ""))
    except TrackingError as exc:
        messages.error(request, f"Not closed: {exc.message}")
    else:
        messages.success(
            request,
            f"{run.name} is closed as abandoned. Events its harness sends later are still recorded, and a "
            f"state it reports after this reopens the run.",
        )
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def rollback(request, slug: str, run_id: str):
    """Roll the run back to one of its submissions or checkpoints (reviewers and admins): one click,
    one rollback however often it is clicked; dispatched by a worker after commit."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    submission = checkpoint = None
    try:
        if request.POST.get("submission"):
            submission = get_object_or_404(Submission, run=run, pk=int(request.POST["submission"]))
        elif request.POST.get("checkpoint"):
            checkpoint = get_object_or_404(Checkpoint, run=run, pk=int(request.POST["checkpoint"]))
    except ValueError:
        messages.error(request, "That rollback target could not be read.")
        return redirect(run.get_absolute_url())
    try:
        requested = rollbacks.request_rollback(
            by=request.user,
            reason=request.POST.get("reason", ""),
            submission=submission,
            checkpoint=checkpoint,
        )
    except TrackingError as exc:
        messages.error(request, exc.message)
    else:
        if requested.created:
            queued = queue.dispatch(tasks.dispatch_rollback, requested.rollback.pk)
            (messages.success if queued else messages.warning)(
                request,
                f"Rollback to {rollbacks.describe_target(requested.rollback)} requested; "
                + (
                    "a worker is dispatching it."
                    if queued
                    else "the worker queue is unreachable right now, so it "
                    "is dispatched as soon as the queue is back."
                ),
            )
        elif requested.rollback.status in Rollback.OPEN:
            messages.warning(
                request,
                f"A rollback of this run is already in flight "
                f"(to {rollbacks.describe_target(requested.rollback)}); it was not requested twice.",
            )
        else:
            done = requested.rollback
            at = timezone.localtime(done.created)  # the viewer's clock (dashboard.clock)
            messages.warning(
                request,
                f"This run was already rolled back to {rollbacks.describe_target(done)} at "
                f"{at:%H:%M} {timezone.get_current_timezone_name()} ({done.status}) and has "
                f"scored nothing since; nothing new was requested.",
            )
    return redirect(request.POST.get("next") if _safe_next(request) else run.get_absolute_url())


@require_POST
@login_required
def run_exclusion(request, slug: str, run_id: str):
    """Take a whole run out of the project's numbers, or count it again (admins; audited)."""
    run = run_for_user(request, slug, run_id, role=Role.ADMIN)
    try:
        if request.POST.get("action") == "include":
            submissions.include_run(run, by=request.user)
            messages.success(request, f"{run.external_id} counts again in the project's numbers.")
        else:
            submissions.exclude_run(run, by=request.user, reason=request.POST.get("reason", ""))
            messages.success(
                request,
                f"{run.external_id} is excluded from the project's numbers (best, "
                f"leaderboard, charts, regressions, carry-forward); include it again at any time.",
            )
    except TrackingError as exc:
        messages.error(request, exc.message)
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def snooze_run(request, slug: str, run_id: str):
    """Snooze the run's alerts for `hours` (action=snooze), or lift the snooze (action=unsnooze);
    reviewers and admins, audited."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    if request.POST.get("action") == "unsnooze":
        services.unsnooze_run(run, by=request.user)
        messages.success(request, f"Alerts about {run.external_id} are sent again.")
        return redirect(run.get_absolute_url())
    try:
        hours = float(request.POST.get("hours", ""))
    except ValueError:
        hours = None
    try:
        if hours is None:
            raise InvalidInput("hours", "A number of hours, e.g. 4 or 0.5.")
        snooze = services.snooze_run(run, by=request.user, hours=hours)
    except InvalidInput as exc:
        messages.error(request, f"Not snoozed: {exc.message}")
    else:
        until = timezone.localtime(snooze.until)  # the viewer's clock (dashboard.clock)
        messages.success(
            request,
            f"Alerts about {run.external_id} are snoozed until {until:%Y-%m-%d %H:%M} "
            f"{timezone.get_current_timezone_name()}; what happens meanwhile is logged, not sent.",
        )
    return redirect(run.get_absolute_url())


def _safe_next(request) -> bool:
    from django.utils.http import url_has_allowed_host_and_scheme

    target = request.POST.get("next", "")
    return bool(target) and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()})
