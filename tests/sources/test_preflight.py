"""Scenario preflight (sources/preflight.py): every check fails and says what is wrong, and passes on
good\nvalues, looking programs up as the sandbox will."""

from __future__ import annotations

import importlib.util
import stat

import pytest

from smrweb.sources import preflight
from smrweb.tracking.models import Scenario
from smrweb.tracking.services import scenarios

VALIDATORS = preflight.VALIDATORS_DIR


ONNX_INSTALLED = importlib.util.find_spec("onnx") is not None  # the validators' interpreter is this one


def preset(key: str, **changes) -> Scenario:
    """A shipped preset as an unsaved scenario, with changes: preflight needs no database."""
    fields = next(f for f in scenarios.read_presets() if f["key"] == key)
    return Scenario(**{**fields, **changes})


def check(report: preflight.PreflightReport, name: str) -> preflight.Check:
    return next(c for c in report.checks if c.name == name)


def test_the_hill_climb_preset_passes_every_check_here():
    report = preflight.preflight(preset("optimizer-hill-climb"))
    assert report.ok, report.problems
    names = {c.name for c in report.checks}
    assert {
        "harness id",
        "artifact path",
        "score metric",
        "direction",
        "arena",
        "validator command",
        "scoring command",
        "required toolchains",
        "score bounds",
        "artifact kind",
        "validator toolchain",
        "toolchain python3",
        "validator program",
    } <= names
    assert report.as_dict()["ok"] is True and report.as_dict()["worker"]


def test_the_onnx_preset_passes_here_because_smrweb_ships_onnx():
    """The demo's Dogfight flow dead-ended on "onnx is not installed" (walkthrough P1-10): it is a
    dependency."""
    assert ONNX_INSTALLED
    report = preflight.preflight(preset("onnx-arena-dogfight"))
    assert report.ok, report.problems
    assert check(report, "toolchain python:onnx").ok
    # The validator also runs the policy (onnxruntime, numpy): the preset says so, and they are here too.
    assert check(report, "toolchain python:onnxruntime").ok and check(report, "toolchain python:numpy").ok


def test_a_missing_python_package_is_reported_exactly():
    report = preflight.preflight(
        preset("onnx-arena-dogfight", required_toolchains=["python3", "python:smrweb_no_such_package"])
    )
    assert not report.ok
    assert [c.name for c in report.problems] == ["toolchain python:smrweb_no_such_package"]
    python = check(report, "toolchain python3").detail.split(" is ")[1]
    assert check(report, "toolchain python:smrweb_no_such_package").detail == (
        f"python package `smrweb_no_such_package` is not installed on this worker (needed by the validator; "
        f"checked with {python}, the validator's interpreter)"
    )


FAILING = [
    # completeness
    ({"harness_id": ""}, "harness id", "no harness id"),
    ({"artifact_path": ""}, "artifact path", "no artifact path"),
    ({"artifact_path": "/srv/optimizer.py"}, "artifact path", "must be relative"),
    ({"artifact_path": "../optimizer.py"}, "artifact path", "without `..`"),
    ({"score_metric": ""}, "score metric", "no score metric"),
    ({"direction": "sideways"}, "direction", "`sideways` is not one of maximize, minimize"),
    ({"arena_url": "ftp://arena.example"}, "arena", "not a valid http(s) URL"),
    ({"arena_url": ""}, "arena", "arena `Optimization Arena` has no URL"),
    ({"validator_command": []}, "validator command", "is not a non-empty list"),
    (
        {"validator_command": "python3 {validators}/optimizer_py.py {artifact}"},
        "validator command",
        "is not a non-empty list",
    ),
    ({"validator_command": ["python3", "", "{artifact}"]}, "validator command", "not a non-empty string"),
    ({"validator_command": ["sh", "-c", "python3 check.py {artifact}"]}, "validator command", "runs a shell"),
    (
        {"validator_command": ["/usr/bin/env", "bash", "-c", "check {artifact}"]},
        "validator command",
        "runs a shell",
    ),
    (
        {"validator_command": ["python3 {validators}/optimizer_py.py", "{artifact}"]},
        "validator command",
        "contains whitespace",
    ),
    (
        {
            "validator_command": [
                "python3",
                "{validators}/optimizer_py.py",
                "{artifact}",
                "&&",
                "rm",
                "-rf",
                "x",
            ]
        },
        "validator command",
        "shell syntax (`&&`)",
    ),
    (
        {"validator_command": ["python3", "{validators}/optimizer_py.py", "{artifact}", ">", "log"]},
        "validator command",
        "shell syntax (`>`)",
    ),
    (
        {"validator_command": ["python3", "{validators}/optimizer_py.py"]},
        "validator command",
        "`{artifact}` placeholder exactly once (found 0)",
    ),
    (
        {"validator_command": ["python3", "{validators}/optimizer_py.py", "{artifact}", "{artifact}"]},
        "validator command",
        "exactly once (found 2)",
    ),
    (
        {"validator_command": ["python3", "{validator}/optimizer_py.py", "{artifact}"]},
        "validator command",
        "unknown placeholder {validator}",
    ),
    ({"scoring_command": ["bash", "-c", "score"]}, "scoring command", "scoring command runs a shell"),
    ({"scoring_command": ["score", "{model}"]}, "scoring command", "unknown placeholder {model}"),
    (
        {"required_toolchains": ["python3", "rust>=1.75"]},
        "required toolchains",
        "unknown toolchain `rust>=1.75`",
    ),
    ({"required_toolchains": ["python3", "python:not a module"]}, "required toolchains", "unknown toolchain"),
    ({"required_toolchains": "python3"}, "required toolchains", "must be a list of strings"),
    # consistency
    ({"score_min": 5.0, "score_max": 1.0}, "score bounds", "score_min 5 is above score_max 1"),
    ({"artifact_kind": "onnx_model"}, "artifact kind", "kind onnx_model needs a path ending in .onnx"),
    (
        {"artifact_path": "submission/optimizer.onnx"},
        "artifact kind",
        "kind python_source needs a path ending in .py",
    ),
    (
        {"artifact_kind": "log", "artifact_path": "submission/model.onnx"},
        "artifact kind",
        "is a onnx_model path, but the kind is log",
    ),
    (
        {"required_toolchains": []},
        "validator toolchain",
        "runs `python3`, which is not among the required toolchains",
    ),
    # on this worker
    (
        {"validator_command": ["python3", "{validators}/no_such_check.py", "{artifact}"]},
        "validator program",
        "no_such_check.py` does not exist on this worker",
    ),
    (
        {"validator_command": ["python3", "check.py", "{artifact}"]},
        "validator program",
        "`check.py` is a relative path, but validators run in an empty temporary directory",
    ),
    (
        {
            "validator_command": ["smrweb-no-such-validator", "{artifact}"],
            "required_toolchains": ["smrweb-no-such-validator"],
        },
        "validator program",
        "`smrweb-no-such-validator` is not on the validators' PATH on this worker",
    ),
    (
        {"validator_command": ["/nonexistent/validate", "{artifact}"]},
        "validator program",
        "`/nonexistent/validate` does not exist or is not executable",
    ),
    (
        {"required_toolchains": ["python3", "smrweb-no-such-tool"]},
        "toolchain smrweb-no-such-tool",
        "`smrweb-no-such-tool` is not on the validators' PATH on this worker",
    ),
    (
        {"required_toolchains": ["python3", "python:smrweb_no_such_module"]},
        "toolchain python:smrweb_no_such_module",
        "python package `smrweb_no_such_module` is not installed on this worker (needed by the validator; "
        "checked with",
    ),
]


@pytest.mark.parametrize(
    "changes, name, message", FAILING, ids=[f"{n}-{i}" for i, (_, n, _) in enumerate(FAILING)]
)
def test_each_check_fails_and_says_what_is_wrong(changes, name, message):
    report = preflight.preflight(preset("optimizer-hill-climb", **changes))
    failed = check(report, name)
    assert not failed.ok
    assert message in failed.detail
    assert not report.ok and report.as_dict()["ok"] is False


PASSING = [
    ({"arena_url": "", "arena_name": ""}, "arena", "no arena"),
    (
        {"scoring_command": ["python3", "{validators}/optimizer_py.py", "{artifact}"]},
        "scoring command",
        "an argument list",
    ),
    ({"artifact_kind": "file"}, "artifact kind", "file at `submission/optimizer.py`"),
    ({"artifact_kind": "archive", "artifact_path": "out/submission.tar.gz"}, "artifact kind", "archive"),
    ({"score_min": None, "score_max": None}, "score bounds", "[-∞, ∞]"),
    (
        {"validator_command": ["{python}", "{validators}/optimizer_py.py", "{artifact}"]},
        "validator program",
        "optimizer_py.py",
    ),
    (
        {"validator_command": ["python3", "{validators}/optimizer_py.py", "--model={artifact}"]},
        "validator command",
        "one `{artifact}`",
    ),
    ({"required_toolchains": ["python3", "python:json"]}, "toolchain python:json", "`json` is importable"),
]


@pytest.mark.parametrize("changes, name, message", PASSING, ids=[n for _, n, _ in PASSING])
def test_each_check_passes_on_good_values(changes, name, message):
    passed = check(preflight.preflight(preset("optimizer-hill-climb", **changes)), name)
    assert passed.ok, passed.detail
    assert message in passed.detail


def test_toolchains_are_looked_up_on_the_validators_path(monkeypatch, tmp_path):
    tool = tmp_path / "fakecargo"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = preflight.sandbox_env()
    scenario = preset("optimizer-hill-climb", required_toolchains=["python3", "fakecargo"])
    assert not check(preflight.preflight(scenario), "toolchain fakecargo").ok  # not on the sandbox PATH

    monkeypatch.setattr(preflight, "sandbox_env", lambda: {**env, "PATH": f"{tmp_path}:{env['PATH']}"})

    found = check(preflight.preflight(scenario), "toolchain fakecargo")
    assert found.ok and found.detail == f"`fakecargo` is {tool}"


def test_a_program_that_is_not_executable_is_reported(tmp_path):
    program = tmp_path / "validate"
    program.write_text("#!/bin/sh\n")  # no execute bit
    report = preflight.preflight(
        preset("optimizer-hill-climb", validator_command=[str(program), "{artifact}"])
    )
    assert f"`{program}` does not exist or is not executable" == check(report, "validator program").detail


def test_resolve_command_fills_in_the_placeholders():
    command = ["python3", "{validators}/onnx_policy.py", "--model={artifact}"]
    assert preflight.resolve_command(command, artifact="/tmp/w/policy.onnx", validators_dir="/opt/v") == [
        "python3",
        "/opt/v/onnx_policy.py",
        "--model=/tmp/w/policy.onnx",
    ]
    assert preflight.resolve_command(command)[1] == str(VALIDATORS / "onnx_policy.py")
