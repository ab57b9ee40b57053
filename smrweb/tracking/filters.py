"""The runs filter, shared by the runs API and the project page so both mean the same thing: state,
stalled, failed, over-budget and tag filters, a search, and a server-side sort (pinned runs first)."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Coalesce, NullIf
from django_filters.rest_framework import BooleanFilter

from smrweb.core import patterns
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    STALLED,
    TERMINAL_STATES,
    AgentTurn,
    Run,
    RunParam,
    RunState,
    RunTag,
    Submission,
    parse_tag,
)
from smrweb.tracking.queries import budget
from smrweb.tracking.services.params import check_param

LIVE = "live"
# A profile-level downgrade, in SQL (a worker-level one lives in `actor_profiles`: see `_downgraded`).
PROFILE_DOWNGRADED = (
    ~Q(requested_profile="") & ~Q(actual_profile="") & ~Q(requested_profile=F("actual_profile"))
)

# ?sort= — the sortable columns. Each sorts on one expression, then on id in the same direction, so a
# page boundary is stable however many runs tie (same state, no score yet, same spend…).
SORTS = {
    "run": Coalesce(NullIf(F("display_name"), Value("")), F("external_id")),  # what the table shows
    "state": F("state"),
    "latest": F("latest_score"),
    "best": F("best_score"),
    "scores": F("score_count"),
    "turns": F("turn_count"),
    "spend": budget.spend_usd(),
    "tokens": budget.spend_tokens(),
    "activity": F("last_progress_at"),
    "started": F("started_at"),
}
DEFAULT_SORT = "-activity"
SORT_CHOICES = [
    (f"{prefix}{key}", f"{key} ({'descending' if prefix else 'ascending'})")
    for key in SORTS
    for prefix in ("", "-")
]
OVER_BUDGET_CHOICES = [
    ("true", "over either budget"),
    ("false", "over neither"),
    (budget.USD, "over the USD budget"),
    (budget.TOKENS, "over the token budget"),
]

# Words a search also understands as the table's badges.
KEYWORDS = {"downgraded", "stalled", "over budget", "over-budget", *RunState.values}


def sort_runs(queryset, sort: str | None):
    """The runs in `sort` order (a SORTS key, `-` first for descending; anything else: the default),
    pinned runs first."""
    sort = sort if sort in dict(SORT_CHOICES) else DEFAULT_SORT
    descending = sort.startswith("-")
    expression = SORTS[sort.lstrip("-")]
    if descending:
        return queryset.order_by(F("pinned").desc(), expression.desc(nulls_last=True), F("id").desc())
    return queryset.order_by(F("pinned").desc(), expression.asc(nulls_last=True), F("id").asc())


class TagsField(forms.Field):
    """Every `?tag=` of the query, each `key` or `key=value`."""

    widget = forms.SelectMultiple  # reads every value of a repeated parameter

    def to_python(self, value) -> list[str]:
        values = [value] if isinstance(value, str) else list(value or [])
        return [str(v).strip() for v in values if str(v).strip()]  # an empty box adds no filter

    def parse(self, text: str):
        return parse_tag(text)

    def validate(self, value) -> None:
        for text in value:
            try:
                self.parse(text)
            except InvalidInput as exc:
                raise forms.ValidationError(exc.message) from None


class TagFilter(django_filters.MultipleChoiceFilter):
    """A repeatable free-text parameter (a multiple choice, for the OpenAPI document's sake)."""

    field_class = TagsField


def parse_param(text: str) -> tuple[str, str | None]:
    """`key` (any value) or `key=value`, as `?param=` reads a run's params (the value may hold "=")."""
    key, sep, value = text.strip().partition("=")
    key, _ = check_param(key.strip(), "")
    return key, (value if sep else None)


class ParamsField(TagsField):
    """Every `?param=` of the query, each `key` or `key=value`."""

    def parse(self, text: str):
        return parse_param(text)


class ParamFilter(django_filters.MultipleChoiceFilter):
    field_class = ParamsField


def with_params(queryset, params: list[str]):
    """The runs with every one of `params`: `key` (logged, any value) or `key=value` (exactly that value)."""
    for text in params:
        key, value = parse_param(text)
        has = RunParam.objects.filter(
            run=OuterRef("pk"), key=key, **({} if value is None else {"value": value})
        )
        queryset = queryset.filter(Exists(has))
    return queryset


def tagged(queryset, tags: list[str]):
    """The runs that carry every one of `tags`: `key` (any value) or `key=value` (exactly that value)."""
    for text in tags:
        key, value = parse_tag(text)
        has = RunTag.objects.filter(run=OuterRef("pk"), key=key, **({"value": value} if "=" in text else {}))
        queryset = queryset.filter(Exists(has))
    return queryset


class SearchField(forms.CharField):
    """A search box's text, checked by the rule every search and pattern shares (core/patterns.py)."""

    def validate(self, value) -> None:
        super().validate(value)
        try:
            patterns.check_search(value or "", field="q")
        except patterns.PatternRefused as exc:
            raise forms.ValidationError(exc.message) from None


class SearchFilter(django_filters.CharFilter):
    field_class = SearchField


class RunFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(
        choices=[(LIVE, "live (not finished)"), *RunState.choices],
        method="filter_state",
        help_text="Repeatable; `live` means any state that is not finished.",
    )
    stalled = BooleanFilter(method="filter_stalled", help_text="Live runs flagged stalled (or not).")
    failed = BooleanFilter(method="filter_failed")
    failed_calls = BooleanFilter(
        method="filter_failed_calls",
        help_text="Runs with failed calls (agent turns that failed), or without.",
    )
    over_budget = django_filters.ChoiceFilter(
        choices=OVER_BUDGET_CHOICES,
        method="filter_over_budget",
        help_text="`true`: runs whose spend exceeds their USD budget or whose tokens (in + out) exceed their "
        "token budget, against the source's own totals where it states them; `usd` or `tokens`: "
        "over that budget; `false`: over neither.",
    )
    tag = TagFilter(
        method="filter_tag",
        help_text="Runs tagged `key` (with any value) or `key=value` (exactly that value); repeat it for "
        "runs that carry every one of them (`?tag=baseline&tag=model=gpt-5`).",
    )
    param = ParamFilter(
        method="filter_param",
        help_text="Runs with the param `key` logged (any value) or `key=value` (exactly that value; MLflow's "
        "params); repeat it for runs with every one of them (`?param=lr=0.01&param=optimizer=adam`).",
    )
    q = SearchFilter(
        method="filter_text",
        max_length=patterns.MAX_SEARCH_CHARS,
        help_text="Case-insensitive substring of the run id or display name, a tag's key or value, failure "
        "family or detail, requested or actual profile (also per actor), git branch, or the model of any "
        "of its agent turns. The words `downgraded`, `stalled`, `over budget` and a state name also match "
        "runs in that condition.",
    )
    sort = django_filters.ChoiceFilter(
        choices=SORT_CHOICES,
        method="filter_sort",
        help_text=f"Order by one column, `-` first for descending (default `{DEFAULT_SORT}`); ties are "
        f"broken by id in the same direction, so pages are stable.",
    )

    class Meta:
        model = Run
        fields = ["state", "stalled", "failed", "failed_calls", "over_budget", "tag", "param", "q", "sort"]

    def filter_state(self, queryset, name, values):
        if not values:
            return queryset
        condition = Q(state__in=[v for v in values if v != LIVE])
        if LIVE in values:
            condition |= ~Q(state__in=TERMINAL_STATES)
        return queryset.filter(condition)

    def filter_stalled(self, queryset, name, value):
        return queryset.filter(STALLED) if value else queryset.exclude(STALLED)

    def filter_failed(self, queryset, name, value):
        return queryset.filter(state=RunState.FAILED) if value else queryset.exclude(state=RunState.FAILED)

    def filter_failed_calls(self, queryset, name, value):
        return queryset.filter(failed_turns__gt=0) if value else queryset.filter(failed_turns=0)

    def filter_over_budget(self, queryset, name, value):
        if value == "false":
            return queryset.exclude(budget.over_budget())
        return queryset.filter(budget.over_budget(on=value if value in budget.KINDS else None))

    def filter_tag(self, queryset, name, value: list[str]):
        return tagged(queryset, value or [])

    def filter_param(self, queryset, name, value: list[str]):
        return with_params(queryset, value or [])

    def filter_sort(self, queryset, name, value):
        return sort_runs(queryset, value)

    def filter_text(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        condition = (
            Q(external_id__icontains=value)
            | Q(display_name__icontains=value)
            | Exists(
                RunTag.objects.filter(Q(key__icontains=value) | Q(value__icontains=value), run=OuterRef("pk"))
            )
            | Q(failure_detail__icontains=value)
            | Q(failure_family__icontains=value)
            | Q(requested_profile__icontains=value)
            | Q(actual_profile__icontains=value)
            | Q(git_branch__icontains=value)
            | Q(actor_profiles__icontains=value)
            | Exists(AgentTurn.objects.filter(run=OuterRef("pk"), model__icontains=value))
        )
        word = " ".join(value.lower().split())
        if word in KEYWORDS:
            condition |= _keyword(queryset, word)
        return queryset.filter(condition)


# The parameters that narrow the runs (every filter but the order): the project page's table and its chart
# follow the same ones, so a filter added to RunFilter narrows both.
NARROWING = tuple(name for name in RunFilter.base_filters if name != "sort")


def _keyword(queryset, word: str) -> Q:
    if word == "downgraded":
        return PROFILE_DOWNGRADED | Q(pk__in=_downgraded_by_actor(queryset))
    if word == "stalled":
        return STALLED
    if word in ("over budget", "over-budget"):
        return budget.over_budget()
    return Q(state=word)


def _downgraded_by_actor(queryset) -> list[int]:
    """Runs where a worker or role got another profile than it asked for. The rule needs each actor's
    entry (`Run.downgraded_actors`), so it is read in one query over the runs that list actors at all."""
    rows = queryset.model.objects.filter(pk__in=queryset.values("pk")).exclude(actor_profiles=[])
    return [
        pk
        for pk, profiles in rows.values_list("pk", "actor_profiles")
        if Run(actor_profiles=profiles).downgraded_actors
    ]


class SubmissionFilter(django_filters.FilterSet):
    run = django_filters.CharFilter(
        field_name="run__external_id",
        max_length=200,
        help_text="Only this run's submissions (its external id, exactly); an unknown run gives an empty "
        "list.",
    )

    class Meta:
        model = Submission
        fields = ["run"]
