"""Liveness over the API: no token or session needed."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.tracking.models import Project


class Health(APIView):
    """Liveness for load balancers and compose: the database answers."""

    permission_classes = []
    authentication_classes = []

    @extend_schema(responses={200: inline_serializer("Health", {"status": serializers.CharField()})})
    def get(self, request):
        Project.objects.exists()
        return Response({"status": "ok"})
