"""The carry-forward block over the API: what the next run's kickoff message should carry, as data and
as the same text the knowledge page offers to copy (see `tracking.queries.carry_forward`)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.access import project_for
from smrweb.api.schema import ERRORS
from smrweb.api.serializers.knowledge import CarryForwardSerializer
from smrweb.tracking import queries


class CarryForward(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "n",
                OpenApiTypes.INT,
                description="How many failed or regressed approaches (1–20, default 3).",
            )
        ],
        responses={200: CarryForwardSerializer, **ERRORS},
        description="Best so far, the last n failed or regressed approaches with their scores and why, the "
        "newest n notes and comments tagged #approach, and the latest arena feedback — as data and as "
        "`text`, for the next run's kickoff message.",
        examples=[
            OpenApiExample(
                "A project with no history yet",
                response_only=True,
                value={
                    "project": "hill",
                    "best": None,
                    "failed": [],
                    "arena": None,
                    "approaches": [],
                    "text": "## Carry-forward: hill (maximize score)\n\n**Best so far:** no valid score "
                    "yet.\n\n"
                    "**Last 3 failed or regressed approaches** (newest first):\nnone recorded.\n\n"
                    "**Latest arena feedback:** none yet.",
                },
            )
        ],
    )
    def get(self, request, slug: str):
        project = project_for(request, slug)
        n = queries.parse_n(request.query_params.get("n"))
        return Response(CarryForwardSerializer(queries.carry_forward(project, n)).data)
