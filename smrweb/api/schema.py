"""drf-spectacular hook: the events endpoint's request schema comes from the pydantic event models,
so the OpenAPI document and the validator cannot drift apart."""

from drf_spectacular.drainage import warn

from smrweb.tracking.events import batch_json_schema


def add_event_components(result, generator, request, public):
    defs = batch_json_schema().get("$defs", {})
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name in sorted(defs.keys() & schemas.keys()):
        if schemas[name] != defs[name]:  # one name, two shapes: the API's component would be replaced
            warn(f"event component {name!r} collides with an API component of the same name")
    schemas.update(defs)
    return result
