"""The run page: its live cards (`RunPage`: each card's version and render) and the metric panel.
Its parts fetched on their own are views/run_parts.py; the actions on a run are views/run_actions.py."""

import functools
import json
import math
from datetime import datetime, timedelta
from functools import cached_property
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.template.context import make_context
from django.template.loader import get_template, render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_safe
from django.views.decorators.vary import vary_on_headers

from smrweb.core import cachekeys
from smrweb.dashboard import charts, live
from smrweb.dashboard.access import fragment_template, role_of, run_for_user
from smrweb.dashboard.charts import series as series_charts
from smrweb.dashboard.templatetags.smrweb import card_version_marker, tool_names
from smrweb.dashboard.views import run_logs, steer
from smrweb.dashboard.views.annotations import run_page_context
from smrweb.dashboard.views.steer import steer_page_context
from smrweb.tracking import queries
from smrweb.tracking.models import (
    Role,
    Rollback,
    Run,
)
from smrweb.tracking.queries import alerts as alert_queries
from smrweb.tracking.queries import markers, progress, series, timeline, turn_memo
from smrweb.tracking.queries.runs import message_kind
from smrweb.tracking.services import capabilities, rollbacks
from smrweb.tracking.services.alerts import spend_rule
from smrweb.tracking.services.capabilities import Action

TURNS_PER_PAGE = 25
ARTIFACTS_PER_PAGE = 10
RECENT_EXPERIMENTS = 10
METRIC_POINTS = 1000
TEMPLATE = "dashboard/run_detail.html"
# The live cards of the page, in page order: each is a partial of TEMPLATE whose outer element has this id.
CARDS = (
    "run-head",
    "run-activity",
    "run-actions",
    "run-alerts",
    "run-abandoned",
    "run-stats",
    "run-timeline-card",
    "budget",
    "run-actors",
    "turns-card",
    "failed-calls",
    "run-logs",
    "run-submissions",
    "artifacts-card",
    "metric-panel",
    "run-experiments",
    "rollbacks",
    "run-states",
    "run-checkpoints",
    "run-messages",
    "run-exclusion",
    "steer-status",  # the Steer card's status part (partials/run_steer.html), outside the live part
    "run-poll",
)
# The cards whose links page or filter them: the card alone comes back (run_logs.PARAMS: the Logs card's).
PAGED = {"turns-card": "turns_page", "artifacts-card": "artifacts_page", run_logs.CARD: "logs_before"}
FAILED_MARKS = 500  # the newest failed calls marked on the timeline
# What a turn's row shows (with its tool calls' count and names): its version in the row cache.
TURN_ROW_FIELDS = (
    "pk",
    "turn",
    "actor",
    "parent_actor",
    "kind",
    "model",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "duration_ms",
    "ts",
)
TIMELINE_STEPS = 32  # a live timeline's axis ends at the next 1/32–1/64 of the run's age (see `horizon`)


def horizon(run, now: datetime) -> datetime:
    """Where a live run's timeline ends: `now` rounded up to a step of 1/32 to 1/64 of the run's age (a power
    of two seconds, and at least the 30-second tick). The bars' width is the span over a fixed number of bins,
    so while the end stays put a new turn adds to the last bar or appends one, and the page gets the new
    points, not a new figure; the axis ends a little ahead of now (at most a 32nd of the run's age, or the
    tick for a young run), and the figure is binned anew when now passes the end."""
    age = max((now - run.started_at).total_seconds(), 0.0)
    tick = min(live.TICK_SECONDS, 3600)
    step = max(2 ** max(0, math.floor(math.log2(max(age, 1.0) / TIMELINE_STEPS))), tick)
    return run.started_at + timedelta(seconds=max(1, math.ceil(age / step)) * step)


def _fields(run, *names: str) -> tuple:
    return tuple(getattr(run, n) for n in names)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# The budget card's parts: what the run's spend moves (each versioned by all of it), and its forecast.
BUDGET_SPEND_PARTS = ("budget-summary", "budget-usd", "budget-tokens", "budget-legend", "budget-split")
BUDGET_PARTS = (*BUDGET_SPEND_PARTS, "budget-forecast")
BUDGET_LEGEND = (
    "driver_cost_usd",
    "child_cost_usd",
    "unknown_tokens_in",
    "unknown_tokens_out",
    "unknown_cost_usd",
    "cost_usd",
    "spend_usd",
    "budget_used_fraction",
)


class RunPage:
    """The run page's live cards: for each, its version (from `queries.markers` and the run row, without
    rendering anything) and how to render it. The page renders them all; a poll renders only those whose
    version differs from what the page says it shows (dashboard/live.py)."""

    def __init__(self, request, run):
        self.request, self.run, self.project = request, run, run.project
        self.now = timezone.now()
        role = role_of(request, self.project)  # read once for every card's permissions
        rank = Role.rank(role) if role else -1
        reviewer = rank >= Role.rank(Role.REVIEWER)
        self.role = role
        self.is_admin = rank >= Role.rank(Role.ADMIN)
        self.can_snooze = reviewer
        self.reviewer = reviewer
        # What the viewer may do here: the one table of what each source can do (services.capabilities).
        project = self.project
        self.stop_refusal = capabilities.refusal(project, Action.STOP, run=run) if reviewer else ""
        self.can_stop = reviewer and not self.stop_refusal
        self.can_roll_back = reviewer and not capabilities.refusal(project, Action.ROLL_BACK)
        self.can_launch = reviewer and not capabilities.refusal(project, Action.LAUNCH)
        self.can_close = reviewer and not capabilities.refusal(project, Action.CLOSE, run=run, now=self.now)
        self.zone = timezone.get_current_timezone_name()
        # The metric key travels with the poll (hx-include of the key picker), not in the page's URLs.
        self.query = request.GET.copy()
        self.query.pop("key", None)
        self.query.pop("x", None)
        self.metric_key = request.GET.get("key") or None
        # The metric panel's x axis: the step, or any axis Compare offers (spend, time, the clock).
        x = request.GET.get("x", "step")
        self.metric_x = x if x in series.AXIS_LABELS else "step"
        self.logs_view = run_logs.LogView.from_query(request.GET)

    # --- what the cards read ----------------------------------------------------------------------------

    @cached_property
    def markers(self):
        return markers.run_markers(self.run, self.now, self.metric_key)

    @cached_property
    def turn_marker(self) -> tuple:
        return (self.run.turn_count, self.markers.turn_last)

    @cached_property
    def polls(self) -> bool:
        """A live run's page polls; a finished run's too while a rollback of it is in flight."""
        return not self.run.is_terminal or bool(self.markers.rollbacks_open)

    @cached_property
    def tags(self) -> list:
        return list(self.run.tags.all())

    @cached_property
    def no_progress(self):
        """The "no progress" reading the title's badge and the alerts show (live runs): two queries, read
        once per change of the turns and scores it depends on (kept in the cache under them), so a turn
        moves those cards only when it moves the reading they show."""
        run, m = self.run, self.markers
        if run.is_terminal:
            return None
        inputs = live.card_version(
            *self.turn_marker,
            run.tokens_in,
            run.tokens_out,
            run.cost_usd,
            m.submission_last,
            m.submissions_updated,
            self.project.scenario.maximize,
        )
        reading = lambda: alert_queries.no_progress(run, best=self.best_counted)  # noqa: E731
        # A reading not kept yet starts from the run's turn aggregates: their stamp is read with it.
        also = [cachekeys.turn_aggregates_stamp(run.pk)]
        return live.remembered(f"run-{run.pk}", "no-progress", inputs, reading, also=also)

    @cached_property
    def scores_version(self) -> str:
        """The version of the run's scores: what its best, its first counted score and the timeline's score
        side are read from (each kept under it: a turn does not read them again)."""
        m = self.markers
        return live.card_version(self.run.score_count, m.submission_last, m.submissions_updated)

    @cached_property
    def best_counted(self) -> tuple | None:
        version = live.card_version(self.scores_version, self.project.scenario.maximize)
        return live.remembered(f"run-{self.run.pk}", "best", version, lambda: progress.best_counted(self.run))

    @cached_property
    def efficiency(self):
        first = live.remembered(
            f"run-{self.run.pk}", "first", self.scores_version, lambda: timeline.first_counted(self.run)
        )
        return timeline.efficiency(self.run, first=first)

    def _no_progress(self, *, numbers: bool = True) -> tuple:
        """The "no progress" reading as a card shows it; without its `numbers` (which grow with each turn:
        parts of their own, see `PARTS`), whether there is one."""
        p = self.no_progress
        if not numbers:
            return (p is not None,)
        return () if p is None else (p.turns, p.tokens, p.usd, p.best_submission_id, p.best_score)

    @cached_property
    def run_alerts(self):
        return alert_queries.run_alerts(self.run, self.now, stuck=self.no_progress)

    @cached_property
    def gaps(self):
        return queries.source_gaps(self.run)

    @cached_property
    def burn(self):
        return timeline.burn_forecast(self.run, now=self.now)

    @cached_property
    def horizon(self) -> datetime:
        return horizon(self.run, self.now)

    @cached_property
    def failed_marks(self) -> list[tuple]:
        """The run's newest failed calls, for the timeline's marks (the partial index of failed turns)."""
        if not self.run.failed_turns:
            return []
        failed = self.run.turns.filter(failed=True).order_by("-id")
        return list(failed.values_list("ts", "error", "http_status", "actor", "turn")[:FAILED_MARKS])

    @cached_property
    def timeline(self):
        return timeline.run_timeline(self.run, now=self.horizon, scores_version=self.scores_version)

    @cached_property
    def timeline_figure(self) -> dict:
        scenario = self.project.scenario
        return charts.run_timeline_figure(
            self.timeline,
            maximize=scenario.maximize,
            metric=scenario.score_metric,
            budget_usd=self.run.budget_usd,
            burn=self.burn,
            uirevision=f"run-{self.run.pk}",
            failed=self.failed_marks,
        )

    def _page(self, queryset, per_page: int, param: str, *, count: int | None = None):
        paginator = Paginator(queryset, per_page)
        if count is not None:
            paginator.count = count  # known already: the paginator's COUNT query is not needed
        return paginator.get_page(self.request.GET.get(param))

    def _query_without(self, *names: str):
        params = self.query.copy()
        for name in names:
            params.pop(name, None)
        return params

    def _pager_query(self, param: str) -> str:
        """The query string minus one parameter (pager links set it again)."""
        return self._query_without(param).urlencode()

    # --- versions -------------------------------------------------------------------------------------------

    SPEND = (
        *Run.SPEND_FIELDS,
        "turn_count",
        "source_total_usd",
        "other_meters_usd",
        "budget_usd",
        "budget_tokens",
    )
    STATE = (
        "state",
        "failure_family",
        "failure_detail",
        "failure_source",
        "stalled_since",
        "started_at",
        "finished_at",
        "live_phase",
        "terminal_outcome",
        "last_polled_at",
    )
    NAME = (
        "external_id",
        "display_name",
        "pinned",
        "excluded_at",
        "excluded_reason",
        "excluded_by_id",
        "archived_at",
        "requested_profile",
        "actual_profile",
        "spend_unaccounted",
        "git_branch",
        "git_commit",
        "parent_id",
    )
    SCORES = ("best_score", "latest_score", "score_count")
    HEAD_STATE = tuple(f for f in STATE if f != "last_polled_at")  # "source checked" is run-activity's

    def _spend(self) -> tuple:
        return (*_fields(self.run, *self.SPEND), _json(self.run.source_spend))

    def _overruns(self) -> tuple:
        """What the title's badge and the alerts show of the spend: the budgets it is over, and by how much
        (and the source's notes on it)."""
        return (_json(self.run.budget_overruns), _json(self.run.source_spend))

    def _stalled(self) -> tuple:
        """The stalled banner and badge say since when (the page script counts the time since)."""
        return (self.run.last_progress_at, self.project.stall_after) if self.run.is_stalled else ()

    def version_parts(self, name: str, *, skeleton: bool = False) -> tuple:
        """What card `name` shows, as the inputs of its version; `skeleton`: of what it shows outside its
        own-versioned parts (`PARTS`)."""
        run, m = self.run, self.markers
        if skeleton and name == "run-actors":  # which actors, in which order: not their figures
            order = [(a.actor, a.depth) for a in self.actors]
            return (self._actor_names, order, bool(run.turn_count))
        if skeleton and name == "run-stats":
            return (*_fields(run, *self.SCORES), m.submission_last, m.submissions_updated)
        if skeleton and name == "turns-card":  # the pager: which page of how many, and its links' query
            page, query = self.turns_page, self._pager_query("turns_page")
            return (page.number, page.paginator.num_pages, query, bool(run.turn_count))
        if skeleton and name == "run-timeline-card":
            # Whether it draws. The chart's element is kept by the page across swaps (hx-preserve): the
            # bars' edges its click reads are the run-timeline-click part's.
            return (bool(self.timeline.turn_total or self.timeline.score_total), run.budget_usd)
        if skeleton and name == "budget":  # all it shows is in its parts
            return ()
        if skeleton and name == "run-activity":  # whether the source was ever checked
            return (run.last_polled_at is not None,)
        if name == "run-poll":
            return (self.polls, self.query.urlencode())
        if name == "run-head":
            # Not its turns nor its spend: only what it shows of them (the "no progress" and "over budget"
            # badges); the news times are the run-activity card's.
            return (
                *_fields(run, *self.NAME, *self.HEAD_STATE, "entries_unreadable"),
                _json(run.actor_profiles),
                self.project.archived_at,
                *self._overruns(),
                m.tags,
                m.loops,
                m.children,
                m.snoozed_until,
                self.can_launch,
                *self._no_progress(numbers=not skeleton),
                *self._stalled(),
            )
        if name == "run-activity":
            return (run.last_progress_at, run.last_polled_at)
        if name == "run-actions":
            closing = (run.last_progress_at, self.project.stall_after) if self.can_close else ()
            return (
                run.state,
                self.can_snooze,
                m.snoozed_until,
                self.can_stop,
                self.stop_refusal,
                self.can_close,
                *closing,
            )
        if name == "run-alerts":
            return (
                *_fields(run, *self.NAME, *self.STATE, *self.SCORES),
                run.last_progress_at if run.is_stalled else None,  # the stalled banner's
                _json(run.actor_profiles),
                _json(run.source_cursor),
                *self._overruns(),
                self.project.regression_threshold,
                self.project.stall_after,
                m.loops,
                m.submission_last,
                m.submissions_updated,
                m.rollbacks,
                self.can_roll_back,
                self.can_launch,  # the rollback line's "Start the next run"
                *self._no_progress(numbers=not skeleton),
                *self._stalled(),
            )
        if name == "run-abandoned":
            return _fields(run, *self.STATE)
        if name == "run-stats":
            # Efficiency starts at the first score that counts: a status change moves it.
            return (
                *self._spend(),
                *_fields(run, *self.SCORES),
                *self.turn_marker,
                m.submission_last,
                m.submissions_updated,
            )
        if name == "run-timeline-card":
            # The clock moves its axis only while it draws something (an empty card says so and no more);
            # the forecast line is read at the newest turn (its marker), until that leaves the burn window.
            drawn = bool(run.turn_count or run.score_count) and not run.is_terminal
            forecast = (m.burning,) if run.budget_usd and drawn else ()
            return (
                *self.turn_marker,
                run.failed_turns,
                run.score_count,
                m.submission_last,
                m.submissions_updated,  # a score found invalid or excluded: drawn hollow, off the best line
                run.budget_usd,
                run.started_at,
                run.is_terminal,
                self.horizon if drawn else None,
                *forecast,
            )
        if name == "budget":
            return (
                *self._spend(),
                run.is_terminal,
                *self.turn_marker,
                # The burn is read at the newest turn (its marker): the clock moves it once, when that turn
                # leaves the burn window.
                self.markers.burning,
            )
        if name == "run-actors":
            return (*self.turn_marker, _json(run.actor_roles))
        if name == "turns-card":
            return (
                *self.turn_marker,
                self._actor_names,
                self.request.GET.get("turns_page"),
                self.query.urlencode(),
            )
        if name == "failed-calls":
            # Its list moves with each failed call; its rate with every turn (only while there are any).
            return (run.failed_turns, run.turn_count if run.failed_turns else 0)
        if name == run_logs.CARD:
            return (*run_logs.version_parts(run, self.logs_view), self.query.urlencode())
        if name == "run-submissions":
            return (run.score_count, m.submission_last, m.submissions_updated, m.artifacts)
        if name == "artifacts-card":
            return (m.artifacts, self.request.GET.get("artifacts_page"), self.query.urlencode())
        if name == "metric-panel":
            # Against another axis than the step, the panel is the run's trace (queries/series.py), kept
            # under what it reads (the metric's rollup and the run's spend and clock).
            trace = (
                series.trace_keys([run], self.metric_key, self.metric_x)[run.pk]
                if self.metric_x != "step"
                else ""
            )
            downsampled = _json((run.metrics_downsampled or {}).get(self.metric_key))
            return (self.metric_key, self.metric_x, m.metric, downsampled, trace)
        if name == "run-experiments":
            return (m.experiments,)
        if name == "rollbacks":
            return (m.rollbacks,)
        if name == "run-states":
            return (m.state_changes,)
        if name == "run-checkpoints":
            return (m.checkpoints, self.can_roll_back, self.project.source)  # the confirm names its effect
        if name == "run-messages":
            return (m.message_last,)
        if name == "run-exclusion":
            return (self.is_admin, run.excluded_at, run.excluded_reason)
        if name == "steer-status":
            project = self.project
            return (
                m.controls,
                run.state,
                self.reviewer,
                project.source,
                project.rollback_webhook_url,
                project.archived_at,
            )
        raise KeyError(name)

    def _rollback_line(self, regressions) -> dict:
        """The latest rollback's outcome, for the top of the page, while it is news: in flight, or
        finished with nothing scored since (a regression banner that already tells it wins)."""
        run = self.run
        latest = run.rollbacks.select_related("target_submission", "target_checkpoint").first()
        if latest is None or any(r.rolled_back and r.rolled_back.pk == latest.pk for r in regressions):
            return {}
        if latest.status not in Rollback.OPEN and run.submissions.filter(ts__gt=latest.created).exists():
            return {}
        said = rollbacks.outcome(latest, run)
        next_url = ""
        if said.next_run and self.can_launch:
            next_url = (
                reverse("dashboard:launch-new", args=[self.project.slug])
                + "?"
                + urlencode({"from": run.external_id})
            )
        return {"rollback_line": said, "rollback_at": latest.created, "rollback_next_url": next_url}

    def version(self, name: str, *inputs) -> str:
        digest = live.template_digest(TEMPLATE)
        return live.card_version(
            digest, name, self.zone, self.project.scenario_id, *(inputs or self.version_parts(name))
        )

    # --- parts ----------------------------------------------------------------------------------------------

    # The cards a new turn changes in a few places: those places (`<!--p:ID-->` parts, each also a partial
    # of TEMPLATE named ID) have versions and renders of their own, so a poll after a turn renders them, not
    # the card (live.Deck.answer). All else the card shows is its skeleton (`version_parts(skeleton=True)`).
    PARTS = {
        "run-head": ("badge-no-progress",),
        "run-alerts": ("alert-no-progress",),
        "run-stats": ("stat-spend", "stat-driver", "stat-child", "stat-turns", "stat-efficiency"),
        "run-actors": (),  # a row per actor (`_actor_parts`)
        # The figure part is sent as a patch of its figure (live.Part.figure): a turn adds to the last bar.
        "run-timeline-card": ("timeline-summary", "run-timeline-data", "run-timeline-click"),
        # The rows part is sent as the rows that arrived and left (live.Part.rows): a turn adds one, not 25.
        "turns-card": ("turns-range", "turns-body"),
        "run-activity": ("run-last-activity", "run-source-checked"),
        "budget": BUDGET_PARTS,
    }
    DRAWN_ONLY = ("run-timeline-data", "run-timeline-click")  # parts in the timeline card once it draws

    @cached_property
    def actors(self) -> list:
        return timeline.actor_tree(self.run)

    @cached_property
    def _actor_parts(self) -> dict[str, object]:
        """The actors table's rows, when it shows one (two actors or more): part id: actor."""
        return {f"actor-row-{i}": a for i, a in enumerate(self.actors)} if len(self.actors) > 1 else {}

    def part_version_parts(self, name: str, part: str) -> tuple:
        run = self.run
        if name == "run-actors":
            a = self._actor_parts[part]
            figures = (a.kind, sorted(a.models), a.turns, a.tokens_in, a.tokens_out, a.cost_usd)
            return (self._actor_names, a.actor, a.depth, *figures, a.first_ts, a.last_ts)
        if part in ("alert-no-progress", "badge-no-progress"):
            return self._no_progress()
        if part == "turns-range":
            return (run.turn_count, self.turns_page.number)
        if part == "timeline-summary":
            return (self.timeline.score_total, self.timeline.turn_total, self.timeline.bin_width)
        if part == "run-timeline-click":
            return (self.timeline.start, self.timeline.bin_width)
        if part == "stat-driver":
            return _fields(run, "driver_tokens_in", "driver_tokens_out", "driver_cost_usd")
        if part == "stat-child":
            return _fields(run, "child_tokens_in", "child_tokens_out", "child_cost_usd")
        if part == "budget-summary":  # "no budget set", or the spend against it
            return (
                run.budget_usd,
                run.budget_tokens,
                *(self._spend() if run.budget_usd or run.budget_tokens else ()),
            )
        if part == "budget-legend":  # the spend by role, and what is billed beyond the turns
            return _fields(run, *BUDGET_LEGEND)
        if part in ("stat-spend", "stat-turns", *BUDGET_SPEND_PARTS):
            return self._spend()
        if part == "run-last-activity":
            return (run.last_progress_at,)
        if part == "run-source-checked":
            return (run.last_polled_at,)
        return self.version_parts(name)  # efficiency, the budget's forecast: all the card reads

    def part_context(self, name: str, part: str) -> dict:
        if name == "run-actors":
            return {"a": self._actor_parts[part], "i": int(part.rsplit("-", 1)[1])}
        if part in ("alert-no-progress", "badge-no-progress"):
            return {"run_alerts": {"no_progress": self.no_progress}}  # what the card's run_alerts says of it
        if part == "stat-efficiency":
            return {"efficiency": self.efficiency}
        if part == "budget-forecast":
            return {"burn": self.burn}
        if name == "turns-card":
            return self.turns_context
        if part == "run-timeline-data":
            return {"timeline_figure": self.timeline_figure}
        if name == "run-timeline-card":
            return {"timeline": self.timeline}
        return {}

    def render_part(self, name: str, part: str) -> str:
        context = {**self._base_context(name, ""), **self.part_context(name, part)}
        template = "actor-row" if name == "run-actors" else part
        return self._render(f"{TEMPLATE}#{template}", context)

    def render_marker(self, name: str, version: str) -> str:
        return card_version_marker(name, version)  # what the cards' `card-version` partial writes

    def layout(self, name: str) -> tuple[str, tuple[live.Part, ...]]:
        """A card's skeleton version and its own-versioned parts (`PARTS`): read by a poll after the card's
        version moved, and kept with its render."""
        skeleton = self.version(name, "skeleton", *self.version_parts(name, skeleton=True))
        ids = list(self._actor_parts) if name == "run-actors" else self.PARTS[name]
        no_progress = ("alert-no-progress", "badge-no-progress")
        if set(ids) & set(no_progress) and self.no_progress is None:  # no reading: no badge and line either
            ids = [i for i in ids if i not in no_progress]
        if name == "run-timeline-card" and not (self.timeline.turn_total or self.timeline.score_total):
            ids = [i for i in ids if i not in self.DRAWN_ONLY]
        if name == "run-activity" and self.run.last_polled_at is None:
            ids = [i for i in ids if i != "run-source-checked"]
        parts = tuple(
            live.Part(
                part,
                self.version(name, part, *self.part_version_parts(name, part)),
                functools.partial(self.render_part, name, part),
                figure=(lambda: self.timeline_figure) if part == "run-timeline-data" else None,
                rows=part == "turns-body",
                reads=self._turn_rows_to_read if part == "turns-body" else None,
            )
            for part in ids
        )
        return skeleton, parts

    def card(self, name: str) -> live.Card:
        version = self.version(name)
        card = live.Card(name, version, functools.partial(self.render_card, name, version))
        if name in self.PARTS:
            card.layout = functools.partial(self.layout, name)
            card.marker = functools.partial(self.render_marker, name, version)
        return card

    # --- contexts ---------------------------------------------------------------------------------------

    def card_context(self, name: str) -> dict:
        run = self.run
        if name == "run-poll":
            return {"polls": self.polls, "poll_query": self.query.urlencode()}
        if name == "run-head":
            return {"tags": self.tags, "run_alerts": self.run_alerts, "gaps": self.gaps}
        if name == "run-actions":
            return {"run_alerts": self.run_alerts}
        if name == "run-alerts":
            regressions = queries.regressions(self.project, [run])
            return {
                "run_alerts": self.run_alerts,
                "gaps": self.gaps,
                "overruns": run.budget_overruns,
                "regressions": regressions,
                "stalled_for": queries.stalled_for(run, self.now),  # whether; the page counts how long
                **self._rollback_line(regressions),
            }
        if name == "run-stats":
            recent = queries.score_histories([run.pk], per_run=6).get(run.pk, [])
            return {"efficiency": self.efficiency, "recent_scores": recent}
        if name == "run-timeline-card":
            return {"timeline": self.timeline, "timeline_figure": self.timeline_figure}
        if name == "budget":
            return {"burn": self.burn}
        if name == "failed-calls":
            return {"failures": queries.failed_calls(run)}
        if name == "run-actors":
            actors = self.actors
            return {
                "actors": actors if len(actors) > 1 else [],
                "single_actor": actors[0].actor if actors else "",
            }
        if name == "turns-card":
            return self.turns_context
        if name == run_logs.CARD:
            logs = run_logs.context(run, self.logs_view, self._query_without(*run_logs.PARAMS))
            return {**logs, "log_rows": self.log_rows(logs["logs"].lines if logs["logs"] else [])}
        if name == "run-submissions":
            return {
                "submissions": run.submissions.select_related("artifact__blob").order_by("-ts", "-id")[:20]
            }
        if name == "artifacts-card":
            page = self._page(
                run.artifacts.select_related("blob").order_by("-created", "-id"),
                ARTIFACTS_PER_PAGE,
                "artifacts_page",
            )
            return {
                "artifacts_page": page,
                "artifacts": list(page),
                "artifact_count": page.paginator.count,
                "pager_query": self._pager_query("artifacts_page"),
            }
        if name == "metric-panel":
            return _metric_context(run, self.metric_key, self.metric_x)
        if name == "run-experiments":
            return {
                "experiments": run.experiments.select_related("parent").order_by("-created", "-id")[
                    :RECENT_EXPERIMENTS
                ],
                "experiment_count": run.experiments.count(),
            }
        if name == "rollbacks":
            return {
                "rollbacks": list(
                    run.rollbacks.select_related("target_submission", "target_checkpoint", "requested_by")[
                        :10
                    ]
                )
            }
        if name == "run-states":
            return {"state_changes": run.state_changes.order_by("-ts", "-id")[:20]}
        if name == "run-checkpoints":
            return {"checkpoints": run.checkpoints.order_by("-ts", "-id")[:20]}
        if name == "run-messages":
            return _runtime_messages(run)
        return {}

    @cached_property
    def turns_page(self):
        """The turns table's page (its turns not read yet), each turn as a tuple of what its row shows (no
        model instances: a live poll reads the page after each turn). The run's turn count is its summary
        column (recomputed from the rows by every write): no COUNT over a long run's turns."""
        run = self.run
        if self.request.GET.get("turns_page", "1") == "1":
            newest = turn_memo.newest_turns(run, TURNS_PER_PAGE)  # a poll after a turn: no query
            if newest is not None:
                return self._page(newest, TURNS_PER_PAGE, "turns_page", count=run.turn_count)
        turns = run.turns.order_by("-ts", "-id").values_list(*turn_memo.TurnRow._fields)
        page = self._page(turns, TURNS_PER_PAGE, "turns_page", count=run.turn_count)
        page.object_list = [turn_memo.TurnRow(*row) for row in page.object_list]
        if page.number == 1:
            turn_memo.keep_newest_turns(run, TURNS_PER_PAGE, page.object_list)
        return page

    @cached_property
    def turns_context(self) -> dict:
        turns = list(self.turns_page)
        return {
            "turns_page": self.turns_page,
            "turns": turns,
            "turn_rows": self.turn_rows(turns, self._turn_row_versions),
            "pager_query": self._pager_query("turns_page"),
        }

    @cached_property
    def _actor_names(self) -> str:
        """What the turns' actor names are read from (`actor_name`): the run's roles, its unknown ones."""
        return _json((self.run.actor_roles, (self.run.source_spend or {}).get("roles_unknown")))

    def _turn_rows_to_read(self) -> list[str]:
        return live.rows_to_read(f"run-{self.run.pk}", self._turn_row_versions)

    @cached_property
    def _turn_row_versions(self) -> list[str]:
        """The versions of the turns table's rows (its page's), each what its row shows."""
        digest = (live.template_digest(TEMPLATE), self.zone, self._actor_names)
        return [
            live.card_version(
                *digest,
                *_fields(t, *TURN_ROW_FIELDS),
                len(t.tool_calls or ()),
                tool_names(t.tool_calls) if t.tool_calls else "",
            )
            for t in self.turns_page
        ]

    def turn_rows(self, turns: list, versions: list[str]) -> list[str]:
        """The turns table's rows, each kept in the cache under what it shows (`versions`): a poll after a
        new turn renders the new turn's row and reads the others (one cache read, made with the parts' own:
        `Part.reads`), not the table."""
        rows = list(zip(versions, turns, strict=True))

        def render(missing: list) -> str:
            context = {"project": self.project, "run": self.run, "turns": missing}
            return self._render(f"{TEMPLATE}#turn-rows", context)

        return [mark_safe(html) for html in live.kept_rows(f"run-{self.run.pk}", rows, render)]  # noqa: S308

    def log_rows(self, lines: list) -> list[str]:
        """The Logs card's lines, each kept in the cache (a line never changes once kept): a live tail's
        poll renders the new lines, not the page."""
        digest = (live.template_digest(TEMPLATE), self.zone)
        rows = [(live.card_version(*digest, line.pk, line.seq), line) for line in lines]

        def render(missing: list) -> str:
            context = {"lines": run_logs.prepare(missing)}
            return self._render(f"{TEMPLATE}#log-rows", context)

        return [mark_safe(html) for html in live.kept_rows(f"run-{self.run.pk}", rows, render)]  # noqa: S308

    def render_card(self, name: str, version: str) -> str:
        if name == "steer-status":
            context = {
                **steer.status_context(self.run, self.role),
                "steer_live_version": version,
                "csrf_token": live.CSRF_PLACEHOLDER,
            }
            return self._render(steer.STATUS, context)
        context = {**self._base_context(name, version), **self.card_context(name)}
        return self._render(f"{TEMPLATE}#{name}", context)

    @cached_property
    def _processed(self) -> dict:
        """What the context processors give this request's templates, run once: a poll after a turn renders
        ~17 parts and rows, and a RequestContext per render ran every processor for each."""
        context = make_context({}, self.request)
        with context.bind_template(get_template(TEMPLATE).template):
            return context.flatten()

    def _render(self, template: str, context: dict) -> str:
        """A card's, part's or rows' template rendered as `render_to_string(…, request=…)` renders it."""
        return render_to_string(template, {**self._processed, **context})

    def _base_context(self, name: str, version: str) -> dict:
        """What every card's (and part's) template reads besides its own context."""
        return {
            "project": self.project,
            "run": self.run,
            "card_name": name,
            "card_version": version,
            "csrf_token": live.CSRF_PLACEHOLDER,
            "is_admin": self.is_admin,
            "can_snooze": self.can_snooze,
            "can_stop": self.can_stop,
            "stop_refusal": self.stop_refusal,
            "can_roll_back": self.can_roll_back,
            "can_launch": self.can_launch,
            "can_close": self.can_close,
        }

    @property
    def shows_steer(self) -> bool:
        """The Steer card is on the page for reviewers, and for anyone once the run was steered."""
        return self.reviewer or bool(self.markers.controls[0])

    def deck(self, names: tuple[str, ...] = CARDS) -> live.Deck:
        if self.metric_key is None:
            names = tuple(n for n in names if n != "metric-panel")
        if not self.shows_steer:
            names = tuple(n for n in names if n != "steer-status")
        return live.Deck(f"run-{self.run.pk}", [self.card(name) for name in names])


@require_safe
@login_required
@vary_on_headers("HX-Request", live.CARDS_HEADER, live.ONLY_HEADER)
def run_detail(request, slug: str, run_id: str):
    """The run page. Its poll sends the versions of the cards it shows and gets 204, or the changed cards
    out of band; a pager asks for its card only; any other htmx request gets the live part whole."""
    run = run_for_user(request, slug, run_id)
    page = RunPage(request, run)
    sent = live.sent_cards(request)
    if sent is not None:
        answer = page.deck().answer(sent)
        return live.no_change() if answer is None else HttpResponse(live.with_token(request, answer))
    only = request.headers.get(live.ONLY_HEADER) if request.htmx else None
    if only in PAGED:  # the other list's pager links carry this page too; the poll follows the new query
        also = ("run-poll", *(name for name in PAGED if name != only))
        return HttpResponse(live.with_token(request, page.deck((only, *also)).only(only, *also)))
    keys = queries.metric_keys(run)
    if page.metric_key not in keys:
        page.metric_key = keys[0] if keys else None
    annotations = run_page_context(request, run, page.role)  # name, pin, tags, note, comments
    page.tags = annotations["tags"]
    deck = page.deck()
    steer_version = deck.cards.pop("steer-status").version if "steer-status" in deck.cards else None
    cards = {
        name.replace("-", "_"): mark_safe(live.with_token(request, html))  # noqa: S308 (rendered templates)
        for name, html in deck.page(fresh=live.wants_fresh(request)).items()
    }
    context = {
        "project": run.project,
        "run": run,
        "cards": cards,
        "metric_keys": keys,
        "metric_key": page.metric_key,
        "metric_x": page.metric_x,
        "metric_axes": [("step", "Step"), *((k, v) for k, v in series.AXES if k != "step")],
        "is_admin": page.is_admin,  # the archive card's
        "can_snooze": page.can_snooze,
        "can_launch": page.can_launch,
        **annotations,
        **steer_page_context(request, run, page.role),  # the Steer card: message, pause, resume
        "steer_live_version": steer_version,  # its status part is a live card (the page's poll keeps it)
        # What the spend-aware stop would do with this run (full renders only: it replays the run's turns).
        "spend_outlook": None if request.htmx else spend_rule.run_outlook(run),
    }
    return render(request, fragment_template(request, TEMPLATE, "run-live"), context)


def _runtime_messages(run) -> dict:
    shown = queries.runtime_messages(run)
    for message in shown:
        message.kind = message_kind(message)
    return {"runtime_messages": shown}


def _metric_context(run, key: str, x: str = "step") -> dict:
    if x != "step":
        found = series.series([(run.external_id, run)], key, x)
        (trace,) = found.traces
        return {
            "metric_key": key,
            "metric_x": x,
            "metric_total": trace.read,
            "metric_shown": len(trace.points),
            "metric_against": series.AXIS_LABELS[x],
            "metric_figure": series_charts.series_figure(found, key, uirevision=f"metric-{run.pk}-{key}-{x}"),
        }
    total, points = queries.metric_series(run, key, METRIC_POINTS)
    return {
        "metric_key": key,
        "metric_x": x,
        "metric_total": total,
        "metric_shown": len(points),
        "metric_figure": charts.metric_figure(key, points, total=total, uirevision=f"metric-{run.pk}-{key}"),
    }


@require_safe
@login_required
def run_metric(request, slug: str, run_id: str):
    """The metric chart panel for one key (the key picker swaps it in; the page's poll keeps it current)."""
    run = run_for_user(request, slug, run_id)
    keys = queries.metric_keys(run)
    key = request.GET.get("key", "")
    if key not in keys:
        return render(
            request,
            f"{TEMPLATE}#metric-panel",
            {"project": run.project, "run": run, "metric_keys": keys, "metric_error": key},
            status=404,
        )
    page = RunPage(request, run)
    page.metric_key = key
    return HttpResponse(live.strip(page.deck(("metric-panel",)).render(["metric-panel"])["metric-panel"]))
