"""Runs over the API: list (filtered), read one, set its settings, its agent turns and its metrics.
Events (`events.py`), artifacts (`artifacts.py`) and rollbacks (`rollbacks.py`) are a run's too, each
in its own module."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, project_for_person, run_for
from smrweb.api.exports import CHUNK_SIZE, ExportableList, ExportNegotiation, export_format
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.runs import (
    MetricKeysSerializer,
    MetricSeriesSerializer,
    RunCloseIn,
    RunDetailSerializer,
    RunPatchSerializer,
    RunSerializer,
    TurnSerializer,
    TurnWithBodySerializer,
    flat_run_table,
)
from smrweb.core import exports
from smrweb.tracking import queries, services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.filters import RunFilter, with_view
from smrweb.tracking.models import AgentTurn, ApiToken, Role, Run
from smrweb.tracking.queries.views import ColumnError, parse_columns
from smrweb.tracking.services.annotations import RUN_LABELS


class ViewFilterBackend(DjangoFilterBackend):
    """The runs filter over `?view=<id>`'s saved query, each parameter the request names replacing the
    view's; a view that is not the project's, or that the caller may not open, is a field error."""

    @staticmethod
    def params(request, view):
        cached = getattr(request, "_runs_view_params", None)
        if cached is not None:
            return cached
        params = request.query_params
        if "view" in params:
            project = project_for(request, view.kwargs["slug"])
            user = None if isinstance(request.auth, ApiToken) else request.user
            saved = queries.find_view(project, user, params.get("view"))
            if saved is None:
                raise InvalidInput(
                    "view",
                    f"No saved view {params.get('view')[:40]!r} in {project.slug!r} that you may open.",
                )
            params = with_view(saved.query, params)
        request._runs_view_params = params
        return params

    def get_filterset_kwargs(self, request, queryset, view):
        kwargs = super().get_filterset_kwargs(request, queryset, view)
        return {**kwargs, "data": self.params(request, view)}


VIEW_PARAMETER = OpenApiParameter(
    "view",
    OpenApiTypes.INT,
    description="A saved view's id (`GET …/views`): its filters, columns, sort and grouping; any other "
    "parameter given replaces the view's of that name.",
)


@extend_schema_view(
    get=extend_schema(parameters=[VIEW_PARAMETER], responses={200: RunSerializer(many=True), **ERRORS})
)
class RunList(ExportableList, generics.ListAPIView):
    """A project's runs, pinned ones first, then most recently active first (or in `?sort=` order), with
    filters.

    `?format=jsonl`: every matching run (no pagination), streamed, as these JSON objects. `?format=csv`: the
    same runs flat, one value per cell: `spend` as `spend_usd` (billed where the source bills, else the
    turns' cost), `billed_usd`, `turn_usd`, `tokens_in`, `tokens_out`, `driver_*`, `child_*`, `other_usd`;
    `failure` as `failure_family`/`_detail`/`_source`; one column per tag key (`tag.<key>`, `true` for a
    label) and per param key (`param.<key>`) of the exported runs. Errors stay JSON."""

    export_name = "runs"

    def export_table(self, fmt, queryset, serializer):
        if fmt == exports.CSV:
            return flat_run_table(queryset, serializer)
        return super().export_table(fmt, queryset, serializer)

    serializer_class = RunSerializer
    queryset = Run.objects.none()  # the model, for the schema; get_queryset scopes it
    filterset_class = RunFilter
    filter_backends = [ViewFilterBackend]

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "columns": self.columns()}

    def columns(self) -> list:
        """The `?col=` columns (the saved view's when `?view=` names one and `col` is not given)."""
        try:
            return parse_columns(ViewFilterBackend.params(self.request, self).getlist("col"))
        except ColumnError:
            return []  # refused with its field by the filter, before any serializer is built

    def get_queryset(self):
        project = project_for(self.request, self.kwargs["slug"])
        return (
            Run.objects.filter(project=project)
            .select_related("project__scenario", "parent")
            .prefetch_related("tags", "params")
            .order_by("-pinned", "-last_progress_at", "-id")
        )


class RunDetail(APIView):
    @extend_schema(responses={200: RunDetailSerializer, **ERRORS})
    def get(self, request, slug: str, run_id: str):
        return Response(RunDetailSerializer(run_for(project_for(request, slug), run_id)).data)

    @extend_schema(
        request=RunPatchSerializer,
        examples=[examples.RUN_SETTINGS, examples.RUN_LABELS],
        responses={200: RunDetailSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        description="Set a run's budget, model profiles or git position (admins; creates the run if new), "
        "and its display name or pin (reviewers; the run must exist).",
    )
    def patch(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.REVIEWER)  # outsiders and viewers before the body
        form = RunPatchSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        settings = dict(form.validated_data)
        labels = {name: settings.pop(name) for name in RUN_LABELS if name in settings}
        actor = actor_of(request)
        if settings or not labels:
            if not isinstance(actor, ApiToken) and not project.allows(request.user, Role.ADMIN):
                raise PermissionDenied(
                    f"A run's budget, profiles and git position need the admin role in {slug!r}."
                )
            run = services.update_run_settings(project, run_id, by=actor, **settings)
        else:
            run = run_for(project, run_id)
        if labels:
            run = services.update_run_labels(run, by=actor, **labels)
        return Response(RunDetailSerializer(run).data)


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter(
                "bodies",
                OpenApiTypes.BOOL,
                description="`1`: each turn with its stored prompt and response (and their sizes); left out "
                "otherwise, of the JSON answer and of the exports alike.",
            )
        ],
        responses={200: TurnSerializer(many=True), **ERRORS},
    )
)
class RunTurns(ExportableList, generics.ListAPIView):
    """A run's agent turns in time order.

    `?format=csv` or `?format=jsonl`: every turn (no pagination), streamed, with a header row of these
    JSON field names; errors stay JSON. Prompt and response bodies only with `?bodies=1`."""

    export_name = "turns"

    serializer_class = TurnSerializer
    queryset = AgentTurn.objects.none()  # the model, for the schema; get_queryset scopes it

    def with_bodies(self) -> bool:
        value = self.request.query_params.get("bodies", "")
        if value not in ("", "0", "1", "true", "false"):
            raise InvalidInput("bodies", "1 (with the prompt and response bodies) or 0.")
        return value in ("1", "true")

    def get_serializer_class(self):
        return TurnWithBodySerializer if self.with_bodies() else TurnSerializer

    @property
    def export_chunk_size(self) -> int:
        return 100 if self.with_bodies() else CHUNK_SIZE  # a turn with bodies may be 2 × 64 KiB

    def get_queryset(self):
        run = run_for(project_for(self.request, self.kwargs["slug"]), self.kwargs["run_id"])
        turns = AgentTurn.objects.filter(run=run).order_by("ts", "id")
        return turns.select_related("body") if self.with_bodies() else turns


METRIC_EXPORT_HEADER = ("key", "step", "value", "ts")


class RunMetrics(ExportNegotiation, APIView):
    @extend_schema(
        description="Without `key`, the run's metric keys; with it, that series, downsampled to `points`. "
        "`?format=csv` or `?format=jsonl`: every stored point of the run (of `key` only, when given), "
        "raw, in key and step order, streamed, columns key, step, value, ts; errors stay JSON.",
        parameters=[
            OpenApiParameter(
                "key", OpenApiTypes.STR, description="Metric key; without it, the list of keys."
            ),
            OpenApiParameter(
                "points", OpenApiTypes.INT, description="At most this many points (default 1000, max 10000)."
            ),
        ],
        responses={
            200: PolymorphicProxySerializer(
                component_name="MetricsAnswer",
                serializers=[MetricKeysSerializer, MetricSeriesSerializer],
                resource_type_field_name=None,
            ),
            **ERRORS,
        },
    )
    def get(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        key = request.query_params.get("key")
        fmt = export_format(request)
        if fmt is not None:
            rows = queries.metric_point_rows(run, key=key or None)
            filename = exports.export_filename(slug, run_id, "metrics", key or "", fmt=fmt)
            return exports.export_response(METRIC_EXPORT_HEADER, rows, fmt=fmt, filename=filename)
        if not key:
            return Response({"keys": queries.metric_keys(run)})
        try:
            points = int(request.query_params.get("points", 1000))
        except ValueError:
            raise InvalidInput("points", "Expected an integer.") from None
        if not 2 <= points <= 10000:
            raise InvalidInput("points", "Must be between 2 and 10000.")
        total, series = queries.metric_series(run, key, points)
        return Response(
            {
                "key": key,
                "total_points": total,
                "downsampled": total > len(series),
                "points": [p.__dict__ for p in series],
            }
        )


class RunClose(APIView):
    @extend_schema(
        operation_id="run_close",
        request=RunCloseIn,
        examples=[examples.RUN_CLOSE],
        responses={
            200: RunSerializer,
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
            409: OpenApiResponse(
                ERROR,
                description="`close_refused`: the project is archived, the run is finished already, belongs "
                "to an SMR project (SMR reports its runs' ends: stop it instead), or has sent news within "
                "the project's stall threshold (the message says how long is left).",
            ),
        },
        summary="Close a silent push or git run as abandoned (reviewers)",
        description="A person's action: a signed-in session with the reviewer or admin role (project tokens "
        "are refused). The run must not be finished and must have sent nothing for the project's "
        "`stall_after`. It ends as `abandoned`, recorded as a state change with `failure` = `{family: "
        '"closed", detail: <reason>, source: <who closed it>}`, and audited. Events that arrive later are '
        "still recorded; a `state` event its harness sends after the close wins, as state always does "
        "(latest by `ts`), and reopens the run. Answers the run.",
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for_person(request, slug, role=Role.REVIEWER, doing="close runs")
        run = run_for(project, run_id)
        body = RunCloseIn(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.close_run(run, by=request.user, reason=body.validated_data["reason"])
        return Response(RunSerializer(run).data)
