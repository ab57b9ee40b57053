"""The OpenAPI document's shared parts: the error body every operation may answer with, and the
drf-spectacular hook that takes the events endpoint's request schema from the pydantic event models, so
the OpenAPI document and the validator cannot drift apart."""

from drf_spectacular.drainage import warn
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

from smrweb.tracking.events import batch_json_schema

# The body of every API error (api/errors.py writes it).
ERROR = inline_serializer(
    "Error",
    {
        "code": serializers.CharField(),
        "message": serializers.CharField(),
        "errors": inline_serializer(
            "FieldError",
            {
                "index": serializers.IntegerField(allow_null=True),
                "field": serializers.CharField(),
                "message": serializers.CharField(),
            },
            many=True,
        ),
    },
)
ERRORS = {code: OpenApiResponse(ERROR) for code in (400, 401, 403, 404)}
# Operations that read a body: one without a Content-Type, or with one they do not parse, is refused.
UNSUPPORTED_MEDIA_TYPE = {
    415: OpenApiResponse(
        ERROR, description="The body's Content-Type is missing or is not one this operation accepts."
    )
}


def add_event_components(result, generator, request, public):
    defs = batch_json_schema().get("$defs", {})
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name in sorted(defs.keys() & schemas.keys()):
        if schemas[name] != defs[name]:  # one name, two shapes: the API's component would be replaced
            warn(f"event component {name!r} collides with an API component of the same name")
    schemas.update(defs)
    return result
