"""A project's audit trail, read: the kinds of action (AuditVerb's verbs, grouped whole or by their noun,
so a verb added to a noun later falls into its group), the filter the audit page and its CSV share,
what each verb means in words, and which audited objects still exist."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import django_filters
from django.db.models import Count, Q, QuerySet

from smrweb.tracking.models import (
    AlertRule,
    ApiToken,
    AuditEvent,
    AuditVerb,
    Comment,
    KnowledgeEntry,
    Membership,
    Project,
    Rollback,
    Run,
    RunControl,
    RunLaunch,
    SavedView,
    ShareLink,
    Submission,
)


@dataclass(frozen=True)
class Kind:
    key: str
    label: str
    prefixes: tuple[str, ...] = ()  # verb starts with one of these ("rollback." or a whole verb)
    suffixes: tuple[str, ...] = ()  # or ends with one of these (".deleted")

    def q(self) -> Q:
        condition = Q(pk__in=[])
        for prefix in self.prefixes:
            condition |= Q(verb__startswith=prefix)
        for suffix in self.suffixes:
            condition |= Q(verb__endswith=suffix)
        return condition

    def matches(self, verb: str) -> bool:
        return verb.startswith(self.prefixes) or verb.endswith(self.suffixes)


# In order: a verb belongs to the first kind that matches it (reviews before the other submission moves,
# comment and alert-rule deletions before deletions, deletions and archiving before the project settings).
# A kind names whole verbs (AuditVerb) and whole nouns ("comment."): every verb smrweb writes is an AuditVerb
# (tests/tracking/test_audit_verbs.py checks each falls into the kind it should).
V = AuditVerb
KINDS: tuple[Kind, ...] = (
    Kind(
        "review",
        "Reviews",
        (V.SUBMISSION_APPROVED, V.SUBMISSION_REJECTED, V.SUBMISSION_REVIEW_NOT_COUNTED, "review."),
    ),
    Kind(
        "annotation",
        "Comments, notes and labels",
        (
            "comment.",
            V.RUN_TAGGED,
            V.RUN_UNTAGGED,
            V.RUN_NOTE_EDITED,
            V.RUN_NOTE_CLEARED,
            V.RUN_PINNED,
            V.RUN_UNPINNED,
            V.RUN_RENAMED,
            V.VIEW_SAVED,
        ),
    ),
    Kind("knowledge", "Knowledge", ("knowledge.",)),
    Kind("alert", "Alert rules and snoozes", ("alert_rule.", V.RUN_SNOOZED, V.RUN_UNSNOOZED)),
    Kind(
        "deletion",
        "Deletion, archive and retention",
        ("retention.", "deletion.", "archive."),
        (".deleted", ".archived", ".unarchived", ".restored", ".purged"),
    ),
    Kind(
        "transition",
        "Submissions and their moves",
        ("submission.", "arena_result.", V.RUN_EXCLUDED, V.RUN_INCLUDED),
    ),
    Kind("rollback", "Rollbacks", ("rollback.",)),
    Kind(
        "stop",
        "Stops and closes",
        (
            V.RUN_STOP_REQUESTED,
            V.RUN_STOPPED,
            V.RUN_STOP_FAILED,
            V.RUN_CLOSED,
            V.RUN_STALLED,
            V.RUN_GUARD_PAUSED,
            V.RUN_GUARD_UNABLE,
        ),
    ),
    Kind("steering", "Steering and launches", ("control.", "launch.")),
    Kind("token", "API tokens", ("token.",)),
    Kind("share", "Share links", ("share_link.",)),
    Kind("member", "Members", ("member.", "invite.")),
    Kind("settings", "Settings", ("project.", V.RUN_SETTINGS_CHANGED, "scenario.")),
)
OTHER = Kind("other", "Other")
KIND_CHOICES = [(k.key, k.label) for k in (*KINDS, OTHER)]
_BY_KEY = {k.key: k for k in KINDS}


def kind_of(verb: str) -> Kind:
    """The kind of action `verb` is (the first in KINDS that matches; OTHER for none)."""
    return next((k for k in KINDS if k.matches(verb)), OTHER)


def kind_q(key: str) -> Q:
    """The rows of kind `key`, in SQL: its own verbs, without those an earlier kind claims."""
    if key == OTHER.key:
        claimed = Q(pk__in=[])
        for kind in KINDS:
            claimed |= kind.q()
        return ~claimed
    condition = _BY_KEY[key].q()
    for earlier in KINDS[: KINDS.index(_BY_KEY[key])]:
        condition &= ~earlier.q()
    return condition


def verb_words(verb: str) -> str:
    """What the verb says: its AuditVerb label (`run.stop_requested` → "Stop requested"); a verb that is
    not one (an imported archive's) reads as "<Noun> <words>"."""
    if verb in AuditVerb.values:
        return AuditVerb(verb).label
    noun, _, action = verb.partition(".")
    text = f"{noun.replace('_', ' ')} {action.replace('_', ' ').replace('.', ' ')}".strip()
    return text[:1].upper() + text[1:]


SUMMARY_MAX = 240


def summary(detail: Any) -> str:
    """The detail dict in one short line: `key: value · key: value`, long values cut."""
    if not isinstance(detail, dict) or not detail:
        return "" if not detail else str(detail)[:SUMMARY_MAX]
    parts = []
    for key, value in detail.items():
        if value in (None, "", [], {}):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        text = " ".join(str(text).split())
        parts.append(f"{key.replace('_', ' ')}: {text[:80]}{'…' if len(text) > 80 else ''}")
    line = " · ".join(parts)
    return line if len(line) <= SUMMARY_MAX else line[: SUMMARY_MAX - 1] + "…"


class AuditFilter(django_filters.FilterSet):
    """`?kind=` (KIND_CHOICES), `?actor=` (who: a user name, `token:<name>` or `system`), `?since=` and
    `?until=` (dates, inclusive, in the viewer's clock)."""

    kind = django_filters.ChoiceFilter(choices=KIND_CHOICES, method="filter_kind", label="Kind")
    actor = django_filters.ChoiceFilter(field_name="actor_label", label="Person")
    since = django_filters.DateFilter(field_name="created", lookup_expr="date__gte", label="From")
    until = django_filters.DateFilter(field_name="created", lookup_expr="date__lte", label="To")

    class Meta:
        model = AuditEvent
        fields = ["kind", "actor", "since", "until"]

    def __init__(self, data=None, queryset=None, *, project: Project, **kwargs):
        super().__init__(data, queryset, **kwargs)
        self.filters["actor"].extra["choices"] = [(a, f"{a} ({n:,})") for a, n in actors(project)]

    def filter_kind(self, queryset, name, value):
        return queryset.filter(kind_q(value)) if value else queryset


def project_events(project: Project) -> QuerySet[AuditEvent]:
    """The project's audit rows, newest first."""
    return AuditEvent.objects.filter(project=project).order_by("-created", "-id")


def actors(project: Project) -> list[tuple[str, int]]:
    """Everyone (and every token, and the system) who has an audited action in `project`, once each, by
    name, with how many actions. `.order_by()` clears the model's ordering: DISTINCT/GROUP BY would take
    its columns too and give one row per event."""
    rows = (
        AuditEvent.objects.filter(project=project)
        .order_by()
        .values_list("actor_label")
        .annotate(n=Count("id"))
    )
    return sorted(((label, n) for label, n in rows), key=lambda row: (row[0].lower(), row[0]))


# object_type (the lower-cased model name, services.record_audit) → the model, and what it belongs to.
_MODELS = {
    "run": (Run, "project"),
    "submission": (Submission, "project"),
    "rollback": (Rollback, "run__project"),
    "runcontrol": (RunControl, "run__project"),
    "runlaunch": (RunLaunch, "project"),
    "apitoken": (ApiToken, "project"),
    "membership": (Membership, "project"),
    "knowledgeentry": (KnowledgeEntry, "project"),
    "alertrule": (AlertRule, "project"),
    "comment": (Comment, "project"),
    "savedview": (SavedView, "project"),
    "sharelink": (ShareLink, "project"),
    "project": (Project, None),
}
_RELATED = {"rollback": ["run"], "runcontrol": ["run"], "comment": ["run"], "membership": ["user"]}


def existing_objects(project: Project, events: Iterable[AuditEvent]) -> dict[tuple[str, str], Any]:
    """The audited objects of `events` that still exist in `project`, by (object_type, object_id): one
    query per type present."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for event in events:
        if event.object_type in _MODELS and str(event.object_id).isdigit():
            wanted[event.object_type].add(int(event.object_id))
    found: dict[tuple[str, str], Any] = {}
    for object_type, ids in wanted.items():
        model, owner = _MODELS[object_type]
        rows = model.objects.filter(pk__in=ids)
        rows = rows.filter(pk=project.pk) if owner is None else rows.filter(**{owner: project})
        rows = rows.select_related(*_RELATED.get(object_type, []))
        for row in rows:
            found[(object_type, str(row.pk))] = row
    return found


def object_label(object_type: str, obj: Any) -> str:
    """What to call an audited object that still exists, as the audit page and the demo console name it: a
    run by its name (never its row id), a submission by its number, a token by its name."""
    match object_type:
        case "run":
            return f"run {obj.name}"
        case "submission":
            return f"submission #{obj.pk}"
        case "rollback" | "runcontrol":
            what = "rollback" if object_type == "rollback" else "steering"
            return f"{what} #{obj.pk} of run {obj.run.name}"
        case "runlaunch":
            return f"launch #{obj.pk}"
        case "apitoken":
            return f"token {obj.name}"
        case "membership":
            return f"member {obj.user.get_username()}"
        case "knowledgeentry":
            return f"knowledge: {obj.title[:60]}"
        case "alertrule":
            return f"alert rule on {obj.trigger}"
        case "comment":
            return f"comment #{obj.pk}"
        case "savedview":
            return f"view {obj.name}"
        case "sharelink":
            return f"share link #{obj.pk} ({obj.get_kind_display().lower()})"
        case "project":
            return f"project {obj.slug}"
    return f"{object_type} {getattr(obj, 'pk', obj)}"
