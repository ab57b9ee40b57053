"""Compare over the API: any series of runs (of this project or any other the caller can read) against any
axis, as Compare's chart draws it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.access import project_for, visible_projects
from smrweb.api.schema import ERRORS
from smrweb.api.serializers.compare import SeriesQuerySerializer, SeriesSerializer
from smrweb.tracking.queries import arms, series


class CompareSeries(APIView):
    @extend_schema(
        parameters=[SeriesQuerySerializer],
        responses={200: SeriesSerializer, **ERRORS},
        description="`metric` of each named run against axis `x`: `usd`, `tokens` and `turns` are what the "
        "run had spent by each point (driver and child work), `time` seconds since its start, `wall` the "
        "clock, `step` the metric's step (a score's ordinal). A run you cannot read is listed in `missing` "
        "exactly as one that does not exist. With `group`, the runs form arms: a median line with a band at "
        "equal x, a table of what each arm bought, and each arm against the leader at equal x.",
    )
    def get(self, request, slug: str):
        project = project_for(request, slug)
        params = SeriesQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.validated_data
        named, missing = series.find_runs(project, visible_projects(request), query["runs"])
        try:
            found = series.series(named, query["metric"], query["x"], missing=missing)
            grouped = arms.arms(found, query["group"]) if query["group"] else ([], [])
        except (series.SeriesError, arms.GroupError) as e:
            raise ValidationError({e.field: [str(e)]}) from None
        return Response(SeriesSerializer(as_api(found, query["group"], *grouped)).data)


def as_api(found: series.Series, group: str = "", arm_list=(), differences=()) -> dict:
    """The series with wall-clock x as ISO 8601 times."""
    wall = found.x == "wall"

    def out(points):
        return [[series.as_datetime(x).isoformat() if wall else x, y] for x, y in points]

    return {
        "metric": found.metric,
        "x": found.x,
        "x_label": series.AXIS_LABELS[found.x],
        "traces": [
            {
                "name": t.name,
                "run": t.run,
                "points": out(t.points),
                "best": out(t.best),
                "x_total": t.x_total,
                "carried": t.carried,
                "read": t.read,
            }
            for t in found.traces
        ],
        "missing": found.missing,
        "without_metric": found.without_metric,
        "group": group,
        "arms": [
            {**vars(a), "n": a.n, "runs": [t.name for t in a.traces], "line": [list(p) for p in a.line]}
            for a in arm_list
        ],
        "differences": [{**vars(d), "separable": d.separable} for d in differences],
    }
