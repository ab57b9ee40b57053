"""The shipped scenario presets: loaded by key, idempotently, refused with the reason when a file is bad."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from smrweb.tracking.models import AuditEvent, Scenario
from smrweb.tracking.services import scenarios


def load(*args) -> str:
    out = io.StringIO()
    call_command("load_presets", *args, stdout=out)
    return out.getvalue()


def test_the_shipped_presets_declare_the_arena_and_the_hill_climb(db):
    load()
    dogfight = Scenario.objects.get(key="onnx-arena-dogfight")
    assert (dogfight.artifact_path, dogfight.artifact_kind, dogfight.score_metric, dogfight.direction) == (
        "submission/policy.onnx",
        "onnx_model",
        "elo",
        "maximize",
    )
    assert dogfight.validator_command == ["python3", "{validators}/onnx_policy.py", "{artifact}"]
    assert dogfight.scoring_command == []  # the arena scores remotely
    needs = {"python3", "python:onnx", "python:onnxruntime", "python:numpy"}
    assert needs <= set(dogfight.required_toolchains)
    assert (dogfight.arena_name, dogfight.arena_url) == (
        "Optimization Arena — Dogfight",
        "https://optimizationarena.com/dogfight",
    )
    climb = Scenario.objects.get(key="optimizer-hill-climb")
    assert (climb.artifact_path, climb.artifact_kind, climb.required_toolchains) == (
        "submission/optimizer.py",
        "python_source",
        ["python3"],
    )
    assert climb.validator_command[:2] == ["python3", "{validators}/optimizer_py.py"]


def test_presets_load_idempotently(db):
    first = load()
    assert "created scenario preset onnx-arena-dogfight" in first
    assert "created scenario preset optimizer-hill-climb" in first
    count = Scenario.objects.count()
    second = load()
    assert Scenario.objects.count() == count
    assert second.strip() == "scenario presets unchanged: onnx-arena-dogfight, optimizer-hill-climb"
    assert Scenario.objects.filter(key="onnx-arena-dogfight").count() == 1


def test_a_changed_preset_field_is_updated_in_place(db, tmp_path):
    load()
    pk = Scenario.objects.get(key="optimizer-hill-climb").pk
    entries = json.loads(scenarios.PRESETS_FIXTURE.read_text())
    entries[1]["fields"].update(score_max=10.0, description="Now bounded.")
    changed = tmp_path / "presets.json"
    changed.write_text(json.dumps(entries))

    out = load("--file", str(changed))

    assert "updated scenario preset optimizer-hill-climb: description, score_max" in out
    scenario = Scenario.objects.get(key="optimizer-hill-climb")
    assert (scenario.pk, scenario.score_max, scenario.description) == (pk, 10.0, "Now bounded.")
    audit = AuditEvent.objects.get(verb="scenario.preset_updated")
    assert audit.detail == {"key": "optimizer-hill-climb", "fields": ["description", "score_max"]}


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"key": "x", "colour": "red"}, "unknown field 'colour'"),
        ({"key": "x", "arena_url": "not a url"}, "arena_url"),
        ({"key": "x", "score_min": 5, "score_max": 1}, "not valid"),
    ],
)
def test_a_bad_preset_file_is_refused_with_the_reason(db, tmp_path, fields, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"model": "tracking.scenario", "fields": {"name": "X", **fields}}]))
    with pytest.raises(CommandError, match=message):
        load("--file", str(bad))
    assert not Scenario.objects.filter(key="x").exists()
