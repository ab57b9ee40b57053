"""Scenario preflight over the API (being built)."""

from rest_framework.response import Response
from rest_framework.views import APIView


class ScenarioPreflight(APIView):
    def post(self, request, key: str):
        return Response({"detail": "not built yet"}, status=501)
