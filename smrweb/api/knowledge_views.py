"""The carry-forward block over the API (being built)."""

from rest_framework.response import Response
from rest_framework.views import APIView


class CarryForward(APIView):
    def get(self, request, slug: str):
        return Response({"detail": "not built yet"}, status=501)
