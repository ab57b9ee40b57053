"""The runs filter, shared by the runs API and the project page so both mean the same thing: state,
stalled, failed, over-budget and tag filters, a search, and a server-side sort (pinned runs first)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import django_filters
from django import forms
from django.db.models import Exists, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce, NullIf
from django.utils.datastructures import MultiValueDict
from django_filters.rest_framework import BooleanFilter

from smrweb.core import patterns
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    STALLED,
    TERMINAL_STATES,
    AgentTurn,
    Run,
    RunLaunch,
    RunParam,
    RunState,
    RunTag,
    Submission,
    parse_tag,
)
from smrweb.tracking.queries import budget
from smrweb.tracking.queries.arms import GroupError, parse_group
from smrweb.tracking.queries.views import ColumnError, parse_column, parse_columns, with_columns
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
COLUMN_SORT = "col:"  # ?sort=col:<column> (or -col:<column>): by a chosen column (queries/views.py)
OVER_BUDGET_CHOICES = [
    ("true", "over either budget"),
    ("false", "over neither"),
    (budget.USD, "over the USD budget"),
    (budget.TOKENS, "over the token budget"),
]

# Words a search also understands as the table's badges.
KEYWORDS = {"downgraded", "stalled", "over budget", "over-budget", *RunState.values}


def check_sort(sort: str) -> str:
    """`sort` when it reads (a SORTS key or `col:<column>`, `-` first for descending); InvalidInput else."""
    name = sort.removeprefix("-")
    if name.startswith(COLUMN_SORT):
        try:
            column = parse_column(name.removeprefix(COLUMN_SORT))
        except ColumnError as exc:
            raise InvalidInput("sort", str(exc)) from None
        return ("-" if sort.startswith("-") else "") + COLUMN_SORT + column.spec
    if sort in dict(SORT_CHOICES):
        return sort
    raise InvalidInput(
        "sort",
        f"Unknown sort {sort[:80]!r}: one of {', '.join(SORTS)} or col:<column>, - first for descending.",
    )


def sort_runs(queryset, sort: str | None, group: str = ""):
    """The runs in `sort` order (a SORTS key or `col:<column>`, `-` first for descending; anything else:
    the default), pinned runs first; with a `group` (arms.parse_group), its arms together first (by
    label, runs without one last), then in `sort` order within each."""
    try:
        sort = check_sort(sort or DEFAULT_SORT)
    except InvalidInput:
        sort = DEFAULT_SORT
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    order = [F("pinned").desc()]
    queryset, by_group = _group_order(queryset, group)
    order += by_group
    if name.startswith(COLUMN_SORT):
        column = parse_column(name.removeprefix(COLUMN_SORT))
        queryset = with_columns(queryset, [column])
        order += column.order(descending)
    else:
        expression = SORTS[name]
        order.append(expression.desc(nulls_last=True) if descending else expression.asc(nulls_last=True))
    return queryset.order_by(*order, F("id").desc() if descending else F("id").asc())


def _group_order(queryset, group: str) -> tuple[object, list]:
    """What puts a group's arms together: the arm label's expression, ascending (runs with none last). A
    project's runs share their project and scenario: those group nothing here."""
    if group in ("", "project", "scenario"):
        return queryset, []
    if group == "profile":
        profile = Coalesce(NullIf(F("actual_profile"), Value("")), NullIf(F("requested_profile"), Value("")))
        return queryset, [profile.asc(nulls_last=True)]
    if group == "kickoff":
        kickoff = RunLaunch.objects.filter(run=OuterRef("pk")).values("kickoff")[:1]
        return queryset.annotate(group_kickoff=Subquery(kickoff)), [F("group_kickoff").asc(nulls_last=True)]
    column = parse_column(group)  # tag:KEY or param:KEY, as a column
    return with_columns(queryset, [column]), column.order(False)


def _invalid(message: str) -> forms.ValidationError:
    """A filter's refusal whose text may hold what was typed (a "%" in a sort key): passed as a parameter,
    since django-filter's API errors format every message with its params (a bare "%" raised a 500)."""
    return forms.ValidationError("%(why)s", params={"why": message})


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
                raise _invalid(exc.message) from None


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
            raise _invalid(exc.message) from None


class SearchFilter(django_filters.CharFilter):
    field_class = SearchField


class ColumnsField(TagsField):
    """Every `?col=` of the query, in order: param:KEY, tag:KEY, metric:KEY[:min|max|last], spend:PART."""

    def validate(self, value) -> None:
        try:
            parse_columns(value)
        except ColumnError as exc:
            raise _invalid(str(exc)) from None


class ColumnFilter(django_filters.MultipleChoiceFilter):
    field_class = ColumnsField


class SortField(forms.CharField):
    def validate(self, value) -> None:
        super().validate(value)
        if value:
            try:
                check_sort(value)
            except InvalidInput as exc:
                raise _invalid(exc.message) from None


class SortFilter(django_filters.CharFilter):
    field_class = SortField


class GroupField(forms.CharField):
    def validate(self, value) -> None:
        super().validate(value)
        try:
            parse_group(value or "")
        except GroupError as exc:
            raise _invalid(str(exc)) from None


class GroupFilter(django_filters.CharFilter):
    field_class = GroupField


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
    col = ColumnFilter(
        method="filter_columns",
        help_text="Repeatable, in order: a column each run item gets in `columns` (and the project page's "
        "table shows): `param:KEY`, `tag:KEY`, `metric:KEY` (the last value logged; `metric:KEY:min` or "
        "`:max` the lowest or highest), or `spend:PART` (usd, driver_usd, child_usd, other_usd, "
        "source_usd, tokens, tokens_in, tokens_out, driver_tokens, child_tokens, failed_calls, "
        "unpriced_turns). At most 12.",
    )
    group = GroupFilter(
        method="filter_group",
        max_length=300,
        help_text="Runs of one arm together (by its label, runs without one last), then in `sort` order: "
        "`profile`, `kickoff`, `tag:KEY` or `param:KEY` (as Compare's arms; `project` and `scenario` "
        "group nothing within a project).",
    )
    sort = SortFilter(
        method="filter_sort",
        max_length=600,
        help_text=f"Order by one column — {', '.join(SORTS)}, or `col:<column>` for any column `col` "
        f"accepts (a param's or tag's numbers in number order) — `-` first for descending (default "
        f"`{DEFAULT_SORT}`); ties are broken by id in the same direction, so pages are stable.",
    )

    class Meta:
        model = Run
        fields = [
            *("state", "stalled", "failed", "failed_calls", "over_budget", "tag", "param", "q"),
            *("col", "group", "sort"),
        ]

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

    def filter_columns(self, queryset, name, value: list[str]):
        return with_columns(queryset, parse_columns(value or []))

    def filter_group(self, queryset, name, value):
        if self.form.cleaned_data.get("sort"):
            return queryset  # `filter_sort`, next, orders by the group first
        return sort_runs(queryset, DEFAULT_SORT, value)

    def filter_sort(self, queryset, name, value):
        return sort_runs(queryset, value, self.form.cleaned_data.get("group") or "")

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


# The parameters that narrow the runs (every filter but the order and the shown columns): the project page's
# table and its chart follow the same ones, so a filter added to RunFilter narrows both.
NARROWING = tuple(name for name in RunFilter.base_filters if name not in ("sort", "col", "group"))
# What a saved view keeps of a runs table's query: what narrows it, the archived runs, its columns, its
# order and grouping (not its page, nor the leaderboard's or the chart's own parameters).
VIEW_PARAMS = (*NARROWING, "archived", "col", "sort", "group")


def view_query(params) -> str:
    """The part of a query string a saved view keeps, in one order (`params`: a QueryDict or any
    MultiValueDict), encoded as a QueryDict encodes it."""
    return urlencode([(key, v) for key in VIEW_PARAMS for v in params.getlist(key) if v.strip()])


def parse_query(query: str) -> MultiValueDict:
    """A query string as the filters read it (every value of a repeated parameter, in order)."""
    parsed = MultiValueDict()
    for key, value in parse_qsl(query.lstrip("?"), keep_blank_values=True):
        parsed.appendlist(key, value)
    return parsed


def checked_view_query(params) -> str:
    """`view_query(params)` when every parameter it keeps reads; InvalidInput naming the first that does
    not (a saved view never holds what the table would ignore). `archived` and `group` are checked too."""
    query = view_query(params)
    kept = parse_query(query)
    form = RunFilter(kept, queryset=Run.objects.none()).form
    if not form.is_valid():
        name, problems = next(iter(form.errors.items()))
        raise InvalidInput(name, " ".join(str(p) for p in problems))
    if kept.get("archived", "1") != "1":
        raise InvalidInput("archived", "`archived=1` shows archived runs; leave it out to hide them.")
    return query


def with_view(query: str, params) -> MultiValueDict:
    """A saved view's query with `params` over it: each parameter the request names replaces the view's
    (so `?view=3&sort=-best` is the view sorted by best); `view` itself is dropped."""
    merged = parse_query(query)
    for key in params:
        if key != "view":
            merged.setlist(key, params.getlist(key))
    return merged


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
