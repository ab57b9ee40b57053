"""OTLP/HTTP trace ingestion (being built)."""

from django.http import JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt


@method_decorator(csrf_exempt, name="dispatch")
class Traces(View):
    def post(self, request):
        return JsonResponse({"code": "not_implemented", "message": "OTLP ingestion is being built."}, status=501)
