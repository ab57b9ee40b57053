"""The spend-aware stop's rule and its readings (issue 38 item 4; docs/alerts.md "Spend guards"): the
settings' checks, `Limits`, a run's `Reading`, and `spend_stop_reason(limits, reading)`, the one rule. The
live guard (`guards.py`) asks it on the run's reading now (`reading_now`); the dry run asks it on the
reading after every turn of a run's history (`run_history`, `project_dry_run`), so what the settings and
run pages say the rule would have done is what it does. The day budget's history (`day_history`) adds up
the same kept quarter-hour spend `queries.spend` reads, in the project's clock."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Sum
from django.utils import timezone

from smrweb.core import numbers
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    RUN_RULE,
    AgentTurn,
    GuardEpisode,
    Project,
    Run,
    RunModelSpend,
    SpendStop,
    Submission,
)
from smrweb.tracking.queries import progress
from smrweb.tracking.queries.spend import project_spend_by_day
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.capabilities import Action

WINDOW_MAX = 100_000  # turns in the marginal window
HISTORY_RUNS = 50  # the dry run replays the project's most recently updated runs
DAY_HISTORY = 30  # days of the day budget's dry run
HISTORY_TURNS_MAX = 20_000  # a run longer than this is not replayed on a page (the run page: the reading now)
DRY_RUN_TURNS_MAX = 200_000  # turns a project's dry run replays at most


# --- the settings -----------------------------------------------------------------------------------------

SPEND_GUARD_SETTINGS = (
    "spend_stop",
    "spend_stop_usd",
    "spend_stop_turns",
    "spend_stop_tokens",
    "spend_stop_usd_per_point",
    "spend_stop_window",
    "day_budget_usd",
    "day_zone",
)
MONEY_MAX = Decimal("1e9")


def check_spend_guard_settings(changes: dict[str, Any]) -> dict[str, Any]:
    """The spend guards' fields among `changes`, checked (InvalidInput names the field) and normalised."""
    out: dict[str, Any] = {}
    if "spend_stop" in changes:
        if changes["spend_stop"] not in SpendStop.values:
            raise InvalidInput("spend_stop", f"One of: {', '.join(SpendStop.values)}.")
        out["spend_stop"] = changes["spend_stop"]
    for name in ("spend_stop_usd", "spend_stop_usd_per_point", "day_budget_usd"):
        if name in changes and changes[name] is not None:
            try:
                value = Decimal(str(changes[name]))
            except ArithmeticError:
                raise InvalidInput(name, "A number of dollars, or empty for no limit.") from None
            if not value.is_finite() or not (0 < value <= MONEY_MAX):
                raise InvalidInput(name, f"More than $0 and at most {numbers.usd(MONEY_MAX)}, or empty.")
            out[name] = value.quantize(Decimal("0.000001"))
    for name, least, most in (
        ("spend_stop_turns", 1, 10**9),
        ("spend_stop_tokens", 1, 10**15),
        ("spend_stop_window", 1, WINDOW_MAX),
    ):
        if name in changes and changes[name] is not None:
            value = changes[name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise InvalidInput(name, f"A whole number from {least:,} to {most:,}.")
    if "spend_stop_window" in changes and changes["spend_stop_window"] is None:
        raise InvalidInput("spend_stop_window", f"A whole number from 1 to {WINDOW_MAX:,}.")
    if "day_zone" in changes:
        zone = str(changes["day_zone"] or "").strip()
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput("day_zone", "An IANA time zone, e.g. UTC or Europe/Paris.") from None
        if not zone or len(zone) > 64 or zone.startswith(("/", ".")) or ".." in zone:
            raise InvalidInput("day_zone", "An IANA time zone, e.g. UTC or Europe/Paris.")
        out["day_zone"] = zone
    return out


# --- the rule ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """The spend-aware stop's limits (None: that limit is not set). From the project, or a form's values
    for a dry run before they are saved."""

    usd: Decimal | None = None
    turns: int | None = None
    tokens: int | None = None
    usd_per_point: Decimal | None = None
    window: int = 50

    @classmethod
    def of(cls, project: Project) -> Limits:
        return cls(
            usd=project.spend_stop_usd,
            turns=project.spend_stop_turns,
            tokens=project.spend_stop_tokens,
            usd_per_point=project.spend_stop_usd_per_point,
            window=project.spend_stop_window,
        )

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.usd, self.turns, self.tokens, self.usd_per_point))

    def words(self) -> str:
        """ "$20 or 200 turns since the best score, or $50 a point over 50 turns"."""
        since = " or ".join(
            filter(
                None,
                [
                    numbers.usd(self.usd) if self.usd is not None else "",
                    f"{self.turns:,} turns" if self.turns is not None else "",
                    f"{numbers.tokens(self.tokens)} tokens" if self.tokens is not None else "",
                ],
            )
        )
        parts = [f"{since} since the best score"] if since else []
        if self.usd_per_point is not None:
            parts.append(f"{numbers.usd(self.usd_per_point)} a point over the last {self.window:,} turns")
        return ", or ".join(parts) or "no limit set"


@dataclass(frozen=True)
class Reading:
    """What the rule reads of a run at one moment: spend since its best score (or its start), and over
    its last `window` turns the spend and the score gained (None: the window is not full yet, or there
    was no score before it to gain from)."""

    episode: str  # "best:<submission id>", or "start" before any score
    best_score: float | None
    usd: Decimal
    turns: int
    tokens: int
    window_turns: int = 0
    window_usd: Decimal = Decimal(0)
    window_gain: float | None = None

    @property
    def usd_per_point(self) -> Decimal | None:
        """Marginal USD per point over the window; None when it cannot be read or nothing was gained."""
        if self.window_gain is None or self.window_gain <= 0:
            return None
        return self.window_usd / Decimal(str(self.window_gain))

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "best_score": self.best_score,
            "usd_since_best": str(self.usd),
            "turns_since_best": self.turns,
            "tokens_since_best": self.tokens,
            "window_turns": self.window_turns,
            "window_usd": str(self.window_usd),
            "window_gain": self.window_gain,
            "usd_per_point": None if self.usd_per_point is None else str(self.usd_per_point),
        }


def spend_stop_reason(limits: Limits, reading: Reading) -> str:
    """Why the rule acts on a run with this reading ("" when it does not): the one rule, live and dry."""
    since = "since its best score" if reading.best_score is not None else "since it started (no score yet)"
    if limits.usd is not None and reading.usd > limits.usd:
        return f"{numbers.usd(reading.usd)} spent {since} (the limit is {numbers.usd(limits.usd)})"
    if limits.turns is not None and reading.turns > limits.turns:
        return f"{reading.turns:,} turns {since} (the limit is {limits.turns:,})"
    if limits.tokens is not None and reading.tokens > limits.tokens:
        return (
            f"{numbers.tokens(reading.tokens)} tokens {since} (the limit is {numbers.tokens(limits.tokens)})"
        )
    if (
        limits.usd_per_point is not None
        and reading.window_gain is not None
        and reading.window_turns >= limits.window
        and reading.window_usd > 0
    ):
        ceiling = numbers.usd(limits.usd_per_point)
        per_point = reading.usd_per_point
        if per_point is None:
            return (
                f"{numbers.usd(reading.window_usd)} over its last {reading.window_turns:,} turns gained no "
                f"score (the ceiling is {ceiling} a point)"
            )
        if per_point > limits.usd_per_point:
            return (
                f"{numbers.usd(per_point)} a point over its last {reading.window_turns:,} turns "
                f"({numbers.usd(reading.window_usd)} for {numbers.number(reading.window_gain)}; the ceiling "
                f"is {ceiling})"
            )
    return ""


# --- the reading now (the live guard) ---------------------------------------------------------------------


def _counted(run: Run):
    return Submission.objects.filter(run=run).counted(**RUN_RULE)  # the run's own best card's rule


def _best(rows, maximize: bool):
    return rows.order_by("-score" if maximize else "score", "ts", "id").values_list("pk", "score").first()


def reading_now(run: Run, window: int) -> Reading:
    """The run's reading now: spend since its best (`queries.progress`, the no-progress alert's reading)
    and its last `window` turns (at most `window` rows and two submission reads)."""
    since = progress.progress_since_best(run)
    maximize = run.project.scenario.maximize
    recent = list(
        AgentTurn.objects.filter(run=run).order_by("-ts", "-id").values_list("ts", "cost_usd")[:window]
    )
    window_usd = sum((usd for _, usd in recent), Decimal(0))
    gain = None
    if len(recent) >= window and since.best_submission_id is not None:
        start = recent[-1][0]
        before = _best(_counted(run).filter(ts__lt=start), maximize)
        if before is not None:
            gain = (since.best_score - before[1]) if maximize else (before[1] - since.best_score)
    return Reading(
        episode=f"best:{since.best_submission_id}" if since.best_submission_id else "start",
        best_score=since.best_score,
        usd=since.usd,
        turns=since.turns,
        tokens=since.tokens,
        window_turns=len(recent),
        window_usd=window_usd,
        window_gain=gain,
    )


# --- the reading over history (the dry run) ---------------------------------------------------------------


@dataclass(frozen=True)
class WouldAct:
    """One time the rule would have acted on a run: after which turn, with what reading, and what the run
    spent after that point (up to its end), and whether it still found a better score later."""

    run: str
    run_pk: int
    turn: int
    at: datetime
    reason: str
    reading: Reading
    spent_after: Decimal
    improved_after: bool


@dataclass
class RunHistory:
    run: str
    acts: list[WouldAct] = field(default_factory=list)
    now: str = ""  # a live run: why the rule would act now ("" when it would not)
    live: bool = False


def run_history(run: Run, limits: Limits) -> RunHistory:
    """Replay the run's turns in time order, with its counted scores among them, and ask the rule after
    every turn: the first time it holds in each episode is where it would have acted. Two queries (the
    scores, then the turns, streamed)."""
    maximize = run.project.scenario.maximize
    scores = list(_counted(run).order_by("ts", "id").values_list("pk", "score", "ts"))
    turns = (
        AgentTurn.objects.filter(run=run)
        .order_by("ts", "id")
        .values_list("turn", "ts", "cost_usd", "tokens_in", "tokens_out")
    )
    history = RunHistory(run=run.external_id, live=not run.is_terminal)
    best: tuple[int, float] | None = None
    best_ts: list[datetime] = []  # when the best changed, with the best from then on
    best_at: list[float] = []
    usd, n, tokens = Decimal(0), 0, 0
    window: deque = deque()
    window_usd = Decimal(0)
    acted: set[str] = set()
    total = Decimal(0)
    spent_at: list[tuple[int, Decimal]] = []  # (index of the act, total spent when it acted)
    i = 0
    reading = None
    for turn, ts, cost, t_in, t_out in turns.iterator(chunk_size=5000):
        while i < len(scores) and scores[i][2] <= ts:  # a score at or before the turn comes first
            pk, score, sts = scores[i]
            if best is None or (score > best[1] if maximize else score < best[1]):
                best = (pk, score)
                best_ts.append(sts)
                best_at.append(score)
                usd, n, tokens = Decimal(0), 0, 0
            i += 1
        usd, n, tokens, total = usd + cost, n + 1, tokens + t_in + t_out, total + cost
        window.append((ts, cost))
        window_usd += cost
        if len(window) > limits.window:
            window_usd -= window.popleft()[1]
        gain = None
        if len(window) >= limits.window and best is not None:
            k = bisect.bisect_left(best_ts, window[0][0])  # the best before the window's first turn
            if k > 0:
                gain = (best[1] - best_at[k - 1]) if maximize else (best_at[k - 1] - best[1])
        reading = Reading(
            episode=f"best:{best[0]}" if best else "start",
            best_score=best[1] if best else None,
            usd=usd,
            turns=n,
            tokens=tokens,
            window_turns=len(window),
            window_usd=window_usd,
            window_gain=gain,
        )
        if reading.episode in acted:
            continue
        if reason := spend_stop_reason(limits, reading):
            acted.add(reading.episode)
            spent_at.append((len(history.acts), total))
            history.acts.append(
                WouldAct(run.external_id, run.pk, turn, ts, reason, reading, Decimal(0), False)
            )
    improved = [ts for ts in best_ts]
    for index, spent in spent_at:
        act = history.acts[index]
        history.acts[index] = WouldAct(
            act.run,
            act.run_pk,
            act.turn,
            act.at,
            act.reason,
            act.reading,
            total - spent,
            any(t > act.at for t in improved),
        )
    if history.live and reading is not None:
        history.now = spend_stop_reason(limits, reading)
    return history


@dataclass
class ProjectDryRun:
    """What the spend-aware stop would have done over the project's history, and the day budget over
    its last days: the runs and times, and what was spent after those points."""

    limits: Limits
    runs_read: int
    acts: list[WouldAct]
    live_now: list[str]  # live runs the rule would act on now
    days: list[DayCrossing]
    day_budget: Decimal | None
    zone: str
    runs_skipped: list[str] = field(default_factory=list)  # longer than a page may replay

    @property
    def spent_after(self) -> Decimal:
        return sum((a.spent_after for a in self.acts), Decimal(0))

    @property
    def runs_acted(self) -> int:
        return len({a.run for a in self.acts})


def project_dry_run(
    project: Project,
    limits: Limits | None = None,
    *,
    day_budget: Decimal | None | bool = False,
    zone: str | None = None,
    runs: int = HISTORY_RUNS,
) -> ProjectDryRun:
    """The spend-aware stop over the project's `runs` most recently updated runs (the same rule as the
    live guard, after every turn), and the day budget over its last DAY_HISTORY days. `limits`,
    `day_budget` and `zone` default to the project's (a form's values preview them before saving)."""
    limits = limits or Limits.of(project)
    if day_budget is False:
        day_budget = project.day_budget_usd
    zone = zone or project.day_zone
    acts: list[WouldAct] = []
    live_now: list[str] = []
    skipped: list[str] = []
    read, replayed = 0, 0
    if limits.any:
        for run in (
            Run.objects.filter(project=project, archived_at__isnull=True)
            .select_related("project__scenario")
            .order_by("-updated", "-id")[:runs]
        ):
            if run.turn_count > HISTORY_TURNS_MAX or replayed + run.turn_count > DRY_RUN_TURNS_MAX:
                skipped.append(run.external_id)  # a page's dry run stays within a few hundred thousand rows
                continue
            read, replayed = read + 1, replayed + run.turn_count
            history = run_history(run, limits)
            acts += history.acts
            if history.now:
                live_now.append(run.external_id)
    acts.sort(key=lambda a: a.at, reverse=True)
    days = day_history(project, day_budget, zone) if day_budget else []
    return ProjectDryRun(limits, read, acts, live_now, days, day_budget or None, zone, skipped)


@dataclass(frozen=True)
class RunOutlook:
    """What the run page says of the spend-aware stop: whether it is on, what it would do now, where it
    would have acted over the run's history (None: the run is too long to replay on a page view), and
    the last time a guard did act on the run."""

    on: bool
    action: str
    limits: Limits
    now: str
    history: RunHistory | None
    acted: GuardEpisode | None
    cannot: str = ""  # why the run's source can neither pause nor stop it ("" when it can)


def run_outlook(run: Run) -> RunOutlook | None:
    """The spend guards on one run, for its page: None when the project set no limit and no day budget
    (or only a day budget that never acted on the run)."""
    project = run.project
    limits = Limits.of(project)
    if not limits.any and project.day_budget_usd is None:
        return None  # no guard set: no query (the run page's query count is held by its tests)
    acted = GuardEpisode.objects.filter(run=run).order_by("-created", "-id").first()
    if not limits.any and acted is None:
        return None
    history, now = None, ""
    if limits.any and run.turn_count <= HISTORY_TURNS_MAX:
        history = run_history(run, limits)
        now = history.now
    elif limits.any and not run.is_terminal:
        now = spend_stop_reason(limits, reading_now(run, limits.window))
    on = project.spend_stop != SpendStop.OFF
    cannot = ""
    if not run.is_terminal and (steer := capabilities.refusal(project, Action.STEER)):
        cannot = capabilities.refusal(project, Action.STOP, run=run) and steer
    return RunOutlook(on, project.get_spend_stop_display() if on else "", limits, now, history, acted, cannot)


# --- the day budget ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DayCrossing:
    """A day (in the project's clock) whose spend reached the budget: when, and what came after."""

    day: date
    at: datetime  # the quarter hour in which the day's spend reached the budget
    spent: Decimal  # the day's whole spend
    spent_after: Decimal  # the day's spend after that quarter hour

    @property
    def clock(self) -> str:
        """The quarter hour in the project's clock ("14:15")."""
        return f"{self.at:%H:%M}"


def today_in(zone: str, now: datetime | None = None) -> date:
    return (now or timezone.now()).astimezone(ZoneInfo(zone)).date()


def day_spend(project: Project, now: datetime | None = None) -> Decimal:
    """What the project's turns cost so far today in its clock (`queries.spend`, from the kept spend)."""
    zone = project.day_zone
    return project_spend_by_day(project, zone, 1, today=today_in(zone, now)).total_usd


def day_history(project: Project, budget: Decimal, zone: str, days: int = DAY_HISTORY) -> list[DayCrossing]:
    """The days of the last `days` (in `zone`) whose spend reached `budget`, newest first: the same
    quarter-hour spend as `queries.spend`, added up in time order. One query."""
    tz = ZoneInfo(zone)
    today = today_in(zone)
    start = datetime.combine(today - timedelta(days=days - 1), datetime.min.time(), tz).astimezone(UTC)
    size = RunModelSpend.SLOT_SECONDS
    rows = (
        RunModelSpend.objects.filter(project=project, slot__gte=int(start.timestamp()) // size)
        .values("slot")
        .annotate(usd=Sum("cost_usd"))
        .order_by("slot")
    )
    per_day: dict[date, list[tuple[datetime, Decimal]]] = {}
    for r in rows:
        at = datetime.fromtimestamp(r["slot"] * size, tz)
        per_day.setdefault(at.date(), []).append((at, r["usd"]))
    crossings = []
    for day, slots in per_day.items():
        running = Decimal(0)
        whole = sum((u for _, u in slots), Decimal(0))
        for at, spent in slots:
            running += spent
            if running >= budget:
                crossings.append(DayCrossing(day, at, whole, whole - running))
                break
    return sorted(crossings, key=lambda c: c.day, reverse=True)
