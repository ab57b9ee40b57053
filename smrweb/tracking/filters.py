"""The runs filter, shared by the runs API and the project page so both mean the same thing."""

import django_filters
from django.db.models import Q
from django_filters.rest_framework import BooleanFilter

from smrweb.tracking.models import TERMINAL_STATES, Run, RunState

LIVE = "live"
STALLED = Q(stalled_since__isnull=False) & ~Q(state__in=TERMINAL_STATES)


class RunFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(
        choices=[(LIVE, "live (not finished)"), *RunState.choices], method="filter_state",
        help_text="Repeatable; `live` means any state that is not finished.",
    )
    stalled = BooleanFilter(method="filter_stalled", help_text="Live runs flagged stalled (or not).")
    failed = BooleanFilter(method="filter_failed")
    q = django_filters.CharFilter(method="filter_text", max_length=200,
                                  help_text="Substring of the run id or failure detail.")

    class Meta:
        model = Run
        fields = ["state", "stalled", "failed", "q"]

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

    def filter_text(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(Q(external_id__icontains=value) | Q(failure_detail__icontains=value))
