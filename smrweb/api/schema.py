"""drf-spectacular hook: the events endpoint's request schema comes from the pydantic event models,
so the OpenAPI document and the validator cannot drift apart."""

from smrweb.tracking.events import batch_json_schema


def add_event_components(result, generator, request, public):
    defs = batch_json_schema().get("$defs", {})
    result.setdefault("components", {}).setdefault("schemas", {}).update(defs)
    return result
