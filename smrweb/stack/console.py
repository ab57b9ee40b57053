"""What `runstack` prints while it runs: one line per meaningful event, not one per HTTP request.

The children's own output (gunicorn's access log, Celery's task lines, the demo harness) goes to a log
file each under DATA_DIR/logs/; the console shows the banner, then this feed: every audited action
(a verification result, a review, a rollback and its outcome, a stop, a stall, a setting changed…) and
every run that failed, read from the database every few seconds.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from django.utils import timezone

from smrweb.tracking.models import AuditEvent, AuditVerb, Project, Run
from smrweb.tracking.queries import audit

# Audit verbs too frequent to be news on a console: every artifact a harness uploads, every run's budget
# and model set at its start. They stay in the audit log.
QUIET_VERBS = frozenset({AuditVerb.ARTIFACT_STORED, AuditVerb.RUN_SETTINGS_CHANGED})
# What the system does on its own every few seconds when a project verifies every score: the outcome
# that needs a person (invalid) is shown, the routine ones are not.
ROUTINE_SYSTEM_VERBS = frozenset(
    {AuditVerb.SUBMISSION_VERIFYING, AuditVerb.SUBMISSION_VERIFIED, AuditVerb.SUBMISSION_CANDIDATE}
)
DETAIL_KEYS = ("key", "reason", "detail", "from_status", "target", "rank", "arena_score")
# Alert mail that arrives every few seconds in the demo (every verified score): counted, and summed up
# once a minute rather than a line each.
ROUTINE_MAIL = frozenset({"submission.needs_review"})


def log_path(log_dir: Path, name: str) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"{name}.log"


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a child's log, to show when it exits."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class EventFeed:
    """New events since the last call, oldest first, as console lines (two queries per call), times UTC."""

    def __init__(self):
        self.last_audit = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
        self.failed: set[int] = set(Run.objects.filter(state="failed").values_list("id", flat=True))

    def lines(self, limit: int = 50) -> Iterator[str]:
        events = list(
            AuditEvent.objects.filter(id__gt=self.last_audit).select_related("project").order_by("id")[:limit]
        )
        if events:
            self.last_audit = events[-1].id
        events = [
            e
            for e in events
            if not (e.verb in QUIET_VERBS or (e.actor_id is None and e.verb in ROUTINE_SYSTEM_VERBS))
        ]
        names = _names(events)
        for event in events:
            where = f"{event.project.slug} " if event.project else ""
            detail = "; ".join(f"{k} {str(event.detail[k])[:80]}" for k in DETAIL_KEYS if event.detail.get(k))
            what = names.get((event.object_type, event.object_id), f"{event.object_type} {event.object_id}")
            yield (
                f"{_clock(event.created)}  {where}{event.verb.replace('.', ' ')} "
                f"{what[:80]} by {event.actor_label}" + (f" ({detail})" if detail else "")
            )
        yield from self._runs()

    def _runs(self) -> Iterator[str]:
        """Failures are not audited (a source reports them): found by state. Stalls are (run.stalled)."""
        for run in (
            Run.objects.filter(state="failed")
            .exclude(id__in=self.failed)
            .select_related("project")
            .order_by("id")[:50]
        ):
            self.failed.add(run.id)
            reason = (
                ": ".join(filter(None, [run.failure_family, run.failure_detail[:120]])) or "no reason given"
            )
            when = _clock(run.finished_at or run.last_progress_at)
            yield f"{when}  {run.project.slug} run {run.external_id} failed — {reason}"


class MailFeed:
    """Console lines for what the demo's mail catcher received: one per alert email, except the routine
    ones, which are summed up every `every` seconds."""

    def __init__(self, every: float = 60.0):
        self.every = every
        self.routine: Counter[tuple[str, str]] = Counter()  # (recipients, trigger) -> messages
        self.latest: dict[tuple[str, str], str] = {}  # -> the latest one's subject
        self.next_summary = time.monotonic() + every

    def lines(self, received: Iterable, now: float | None = None) -> Iterator[str]:
        """`received`: the catcher's news (recipients, subject, trigger of each message)."""
        for message in received:
            to = ", ".join(message.recipients)
            if message.trigger in ROUTINE_MAIL:
                self.routine[(to, message.trigger)] += 1
                self.latest[(to, message.trigger)] = message.subject
                continue
            yield f"{_clock(None)}  mail to {to}: {message.subject}"
        now = time.monotonic() if now is None else now
        if now >= self.next_summary:
            self.next_summary = now + self.every
            for (to, trigger), n in sorted(self.routine.items()):
                yield f"{_clock(None)}  mail to {to}: {n} × {trigger} (latest: {self.latest[(to, trigger)]})"
            self.routine.clear()
            self.latest.clear()


def _names(events: list[AuditEvent]) -> dict[tuple[str, str], str]:
    """What the audit page calls each event's object (a run by its name, not its row id), per project."""
    by_project: dict[Project, list[AuditEvent]] = defaultdict(list)
    for event in events:
        if event.project is not None:
            by_project[event.project].append(event)
    return {
        key: audit.object_label(key[0], obj)
        for project, mine in by_project.items()
        for key, obj in audit.existing_objects(project, mine).items()
    }


def _clock(at: datetime | None) -> str:
    return (at or timezone.now()).astimezone(UTC).strftime("%H:%M:%S")
