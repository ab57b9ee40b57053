"""Scenario presets: the shipped ones (fixtures/scenario_presets.json) upserted by key, audited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import transaction

from smrweb.tracking import services
from smrweb.tracking.models import AuditVerb, Scenario

PRESETS_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "scenario_presets.json"


def read_presets(path: Path = PRESETS_FIXTURE) -> list[dict[str, Any]]:
    """The presets of a fixture file (Django's fixture format, without primary keys) as field dicts."""
    entries = json.loads(Path(path).read_text(encoding="utf-8"))
    presets = []
    for entry in entries:
        if entry.get("model") != "tracking.scenario" or "key" not in entry.get("fields", {}):
            raise ValueError(f"{path}: every entry must be a tracking.scenario with a key: {entry!r:.200}")
        for name in entry["fields"]:
            try:
                Scenario._meta.get_field(name)
            except FieldDoesNotExist:
                key = entry["fields"]["key"]
                raise ValueError(f"{path}: scenario {key!r} has an unknown field {name!r}") from None
        presets.append(dict(entry["fields"]))
    return presets


def _validate(scenario: Scenario, path: Path) -> None:
    try:
        scenario.full_clean(validate_unique=False)
    except ValidationError as exc:
        raise ValueError(f"{path}: scenario {scenario.key!r} is not valid: {exc.message_dict}") from None


def load_presets(path: Path = PRESETS_FIXTURE, *, by: Any = None) -> list[tuple[str, str, list[str]]]:
    """Upsert the presets by key (idempotent); returns (key, created|updated|unchanged, changed fields).
    Fields the fixture does not name are left alone; scenarios it does not name are kept (projects may
    use them)."""
    results = []
    for fields in read_presets(path):
        key = fields["key"]
        with transaction.atomic():
            scenario = Scenario.objects.select_for_update().filter(key=key).first()
            if scenario is None:
                _validate(Scenario(**fields), path)
                services.create_scenario(by=by, **fields)
                results.append((key, "created", sorted(fields)))
                continue
            changed = sorted(name for name, value in fields.items() if getattr(scenario, name) != value)
            if changed:
                for name in changed:
                    setattr(scenario, name, fields[name])
                _validate(scenario, path)
                scenario.save(update_fields=[*changed, "updated"])
                services.record_audit(
                    by, AuditVerb.SCENARIO_PRESET_UPDATED, scenario, key=key, fields=changed
                )
            results.append((key, "updated" if changed else "unchanged", changed))
    return results
