"""Scenario presets: the shipped fixture loads idempotently, preflight reports every check failing and
passing (and exactly what is missing on this machine), and the shipped validator scripts judge good and
bad artifacts."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
from django.core.management import CommandError, call_command

from smrweb.sources import preflight
from smrweb.tracking.services import scenarios
from smrweb.tracking.models import AuditEvent, Scenario

VALIDATORS = preflight.VALIDATORS_DIR
ONNX_INSTALLED = importlib.util.find_spec("onnx") is not None  # the validators' interpreter is this one


def preset(key: str, **changes) -> Scenario:
    """A shipped preset as an unsaved scenario, with changes: preflight needs no database."""
    fields = next(f for f in scenarios.read_presets() if f["key"] == key)
    return Scenario(**{**fields, **changes})


def check(report: preflight.PreflightReport, name: str) -> preflight.Check:
    return next(c for c in report.checks if c.name == name)


def load(*args) -> str:
    out = io.StringIO()
    call_command("load_presets", *args, stdout=out)
    return out.getvalue()


# --- the fixture and load_presets ---------------------------------------------------------------


def test_the_shipped_presets_declare_the_arena_and_the_hill_climb(db):
    load()
    dogfight = Scenario.objects.get(key="onnx-arena-dogfight")
    assert (dogfight.artifact_path, dogfight.artifact_kind, dogfight.score_metric, dogfight.direction) == (
        "submission/policy.onnx", "onnx_model", "elo", "maximize")
    assert dogfight.validator_command == ["python3", "{validators}/onnx_policy.py", "{artifact}"]
    assert dogfight.scoring_command == []  # the arena scores remotely
    assert "python:onnx" in dogfight.required_toolchains
    assert (dogfight.arena_name, dogfight.arena_url) == ("Optimization Arena — Dogfight",
                                                         "https://optimizationarena.com/dogfight")
    climb = Scenario.objects.get(key="optimizer-hill-climb")
    assert (climb.artifact_path, climb.artifact_kind, climb.required_toolchains) == (
        "submission/optimizer.py", "python_source", ["python3"])
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


@pytest.mark.parametrize("fields, message", [
    ({"key": "x", "colour": "red"}, "unknown field 'colour'"),
    ({"key": "x", "arena_url": "not a url"}, "arena_url"),
    ({"key": "x", "score_min": 5, "score_max": 1}, "not valid"),
])
def test_a_bad_preset_file_is_refused_with_the_reason(db, tmp_path, fields, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"model": "tracking.scenario", "fields": {"name": "X", **fields}}]))
    with pytest.raises(CommandError, match=message):
        load("--file", str(bad))
    assert not Scenario.objects.filter(key="x").exists()


# --- preflight ------------------------------------------------------------------------------------


def test_the_hill_climb_preset_passes_every_check_here():
    report = preflight.preflight(preset("optimizer-hill-climb"))
    assert report.ok, report.problems
    names = {c.name for c in report.checks}
    assert {"harness id", "artifact path", "score metric", "direction", "arena", "validator command",
            "scoring command", "required toolchains", "score bounds", "artifact kind", "validator toolchain",
            "toolchain python3", "validator program"} <= names
    assert report.as_dict()["ok"] is True and report.as_dict()["worker"]


def test_the_onnx_preset_passes_here_because_smrweb_ships_onnx():
    """The demo's Dogfight flow dead-ended on "onnx is not installed" (walkthrough P1-10): it is a dependency."""
    assert ONNX_INSTALLED
    report = preflight.preflight(preset("onnx-arena-dogfight"))
    assert report.ok, report.problems
    assert check(report, "toolchain python:onnx").ok


def test_a_missing_python_package_is_reported_exactly():
    report = preflight.preflight(preset("onnx-arena-dogfight",
                                        required_toolchains=["python3", "python:smrweb_no_such_package"]))
    assert not report.ok
    assert [c.name for c in report.problems] == ["toolchain python:smrweb_no_such_package"]
    python = check(report, "toolchain python3").detail.split(" is ")[1]
    assert check(report, "toolchain python:smrweb_no_such_package").detail == (
        f"python package `smrweb_no_such_package` is not installed on this worker (needed by the validator; "
        f"checked with {python}, the validator's interpreter)")


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
    ({"validator_command": "python3 {validators}/optimizer_py.py {artifact}"}, "validator command",
     "is not a non-empty list"),
    ({"validator_command": ["python3", "", "{artifact}"]}, "validator command", "not a non-empty string"),
    ({"validator_command": ["sh", "-c", "python3 check.py {artifact}"]}, "validator command", "runs a shell"),
    ({"validator_command": ["/usr/bin/env", "bash", "-c", "check {artifact}"]}, "validator command",
     "runs a shell"),
    ({"validator_command": ["python3 {validators}/optimizer_py.py", "{artifact}"]}, "validator command",
     "contains whitespace"),
    ({"validator_command": ["python3", "{validators}/optimizer_py.py", "{artifact}", "&&", "rm", "-rf", "x"]},
     "validator command", "shell syntax (`&&`)"),
    ({"validator_command": ["python3", "{validators}/optimizer_py.py", "{artifact}", ">", "log"]},
     "validator command", "shell syntax (`>`)"),
    ({"validator_command": ["python3", "{validators}/optimizer_py.py"]}, "validator command",
     "`{artifact}` placeholder exactly once (found 0)"),
    ({"validator_command": ["python3", "{validators}/optimizer_py.py", "{artifact}", "{artifact}"]},
     "validator command", "exactly once (found 2)"),
    ({"validator_command": ["python3", "{validator}/optimizer_py.py", "{artifact}"]}, "validator command",
     "unknown placeholder {validator}"),
    ({"scoring_command": ["bash", "-c", "score"]}, "scoring command", "scoring command runs a shell"),
    ({"scoring_command": ["score", "{model}"]}, "scoring command", "unknown placeholder {model}"),
    ({"required_toolchains": ["python3", "rust>=1.75"]}, "required toolchains", "unknown toolchain `rust>=1.75`"),
    ({"required_toolchains": ["python3", "python:not a module"]}, "required toolchains", "unknown toolchain"),
    ({"required_toolchains": "python3"}, "required toolchains", "must be a list of strings"),
    # consistency
    ({"score_min": 5.0, "score_max": 1.0}, "score bounds", "score_min 5 is above score_max 1"),
    ({"artifact_kind": "onnx_model"}, "artifact kind", "kind onnx_model needs a path ending in .onnx"),
    ({"artifact_path": "submission/optimizer.onnx"}, "artifact kind", "kind python_source needs a path ending in .py"),
    ({"artifact_kind": "log", "artifact_path": "submission/model.onnx"}, "artifact kind",
     "is a onnx_model path, but the kind is log"),
    ({"required_toolchains": []}, "validator toolchain", "runs `python3`, which is not among the required toolchains"),
    # on this worker
    ({"validator_command": ["python3", "{validators}/no_such_check.py", "{artifact}"]}, "validator program",
     "no_such_check.py` does not exist on this worker"),
    ({"validator_command": ["python3", "check.py", "{artifact}"]}, "validator program",
     "`check.py` is a relative path, but validators run in an empty temporary directory"),
    ({"validator_command": ["smrweb-no-such-validator", "{artifact}"],
      "required_toolchains": ["smrweb-no-such-validator"]}, "validator program",
     "`smrweb-no-such-validator` is not on the validators' PATH on this worker"),
    ({"validator_command": ["/nonexistent/validate", "{artifact}"]}, "validator program",
     "`/nonexistent/validate` does not exist or is not executable"),
    ({"required_toolchains": ["python3", "smrweb-no-such-tool"]}, "toolchain smrweb-no-such-tool",
     "`smrweb-no-such-tool` is not on the validators' PATH on this worker"),
    ({"required_toolchains": ["python3", "python:smrweb_no_such_module"]}, "toolchain python:smrweb_no_such_module",
     "python package `smrweb_no_such_module` is not installed on this worker (needed by the validator; checked with"),
]


@pytest.mark.parametrize("changes, name, message", FAILING, ids=[f"{n}-{i}" for i, (_, n, _) in enumerate(FAILING)])
def test_each_check_fails_and_says_what_is_wrong(changes, name, message):
    report = preflight.preflight(preset("optimizer-hill-climb", **changes))
    failed = check(report, name)
    assert not failed.ok
    assert message in failed.detail
    assert not report.ok and report.as_dict()["ok"] is False


PASSING = [
    ({"arena_url": "", "arena_name": ""}, "arena", "no arena"),
    ({"scoring_command": ["python3", "{validators}/optimizer_py.py", "{artifact}"]}, "scoring command",
     "an argument list"),
    ({"artifact_kind": "file"}, "artifact kind", "file at `submission/optimizer.py`"),
    ({"artifact_kind": "archive", "artifact_path": "out/submission.tar.gz"}, "artifact kind", "archive"),
    ({"score_min": None, "score_max": None}, "score bounds", "[-∞, ∞]"),
    ({"validator_command": ["{python}", "{validators}/optimizer_py.py", "{artifact}"]}, "validator program",
     "optimizer_py.py"),
    ({"validator_command": ["python3", "{validators}/optimizer_py.py", "--model={artifact}"]}, "validator command",
     "one `{artifact}`"),
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
    report = preflight.preflight(preset("optimizer-hill-climb", validator_command=[str(program), "{artifact}"]))
    assert f"`{program}` does not exist or is not executable" == check(report, "validator program").detail


def test_resolve_command_fills_in_the_placeholders():
    command = ["python3", "{validators}/onnx_policy.py", "--model={artifact}"]
    assert preflight.resolve_command(command, artifact="/tmp/w/policy.onnx", validators_dir="/opt/v") == [
        "python3", "/opt/v/onnx_policy.py", "--model=/tmp/w/policy.onnx"]
    assert preflight.resolve_command(command)[1] == str(VALIDATORS / "onnx_policy.py")


# --- the validator scripts --------------------------------------------------------------------------


def run_validator(script: str, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(VALIDATORS / script), *map(str, args)], check=False,
                          capture_output=True, text=True, timeout=60, env=env)


def write(tmp_path, text: str | bytes, name: str = "optimizer.py"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else textwrap.dedent(text).encode())
    return path


GOOD_OPTIMIZER = textwrap.dedent("""
    import math

    class Optimizer:
        def __init__(self, params, lr=1e-3):
            self.params, self.lr = list(params), lr

        def step(self):
            for p in self.params:
                p.data -= self.lr * p.grad
""")


def test_optimizer_validator_passes_a_good_file_without_running_it(tmp_path):
    ran = tmp_path / "ran"
    path = write(tmp_path, GOOD_OPTIMIZER + f"\nopen({str(ran)!r}, 'w').write('top-level code ran')\n")
    done = run_validator("optimizer_py.py", path)
    assert done.returncode == 0, done.stdout
    assert "PASS  defines `Optimizer.step`" in done.stdout and f"valid: {path}" in done.stdout
    assert not ran.exists()


@pytest.mark.parametrize("source, message", [
    ("def step(:\n    pass\n", "FAIL  does not compile at line 1"),
    ("def f():\n    pass\nreturn 1\n", "FAIL  does not compile at line 3: 'return' outside function"),
    ("def optimize():\n    pass\n", "FAIL  no top-level `Optimizer` (top-level functions and classes: optimize)"),
    ("class Optimizer:\n    def zero_grad(self):\n        pass\n", "FAIL  class `Optimizer` has no `step` method"),
    ("def Optimizer():\n    pass\n", "FAIL  `Optimizer` is a function, expected a class with a `step` method"),
    ("if True:\n    class Optimizer:\n        def step(self):\n            pass\n", "FAIL  no top-level `Optimizer`"),
    (b"# caf\xe9\nclass Optimizer: pass\n", "FAIL  not UTF-8: byte 5 cannot be decoded"),
    (b"x = 1\x00\n", "FAIL  does not compile"),
])
def test_optimizer_validator_fails_bad_files(tmp_path, source, message):
    done = run_validator("optimizer_py.py", write(tmp_path, source))
    assert done.returncode == 1, done.stdout
    assert message in done.stdout and "invalid:" in done.stdout


def test_optimizer_validator_accepts_an_inherited_step_and_other_entry_points(tmp_path):
    inherited = write(tmp_path, "class Base:\n    def step(self): ...\nclass Optimizer(Base):\n    pass\n")
    assert run_validator("optimizer_py.py", inherited).returncode == 0
    function = write(tmp_path, "def optimize(f, x0):\n    return x0\n")
    assert run_validator("optimizer_py.py", "--entry", "optimize", function).returncode == 0


def test_optimizer_validator_caps_the_size_and_refuses_bad_arguments(tmp_path):
    big = write(tmp_path, GOOD_OPTIMIZER + "#" * 2000)
    done = run_validator("optimizer_py.py", "--max-bytes", "1000", big)
    assert done.returncode == 1 and "FAIL  larger than 1,000 bytes" in done.stdout
    assert run_validator("optimizer_py.py", tmp_path / "missing.py").returncode == 1
    assert run_validator("optimizer_py.py", "--entry", "a.b.c", big).returncode == 2
    assert run_validator("optimizer_py.py").returncode == 2


def test_onnx_validator_cannot_run_without_onnx(tmp_path):
    # A package named onnx that fails to import stands in for "not installed", even where it is.
    fake = tmp_path / "site" / "onnx"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named onnx')\n")
    done = run_validator("onnx_policy.py", write(tmp_path, b"x", "policy.onnx"),
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == 2
    assert "CANNOT RUN  python package `onnx` is not installed" in done.stdout
    assert run_validator("onnx_policy.py").returncode == 2  # no model named


# A hand-built stand-in for the `onnx` package: `load` reads a JSON description of a model, with exactly
# the attributes the validator reads from the real protobuf messages.
FAKE_ONNX = """
import json
from types import SimpleNamespace as NS

class TensorProto:
    FLOAT, INT64 = 1, 7

class checker:
    @staticmethod
    def check_model(model):
        if getattr(model, "broken", False):
            raise ValueError("Field 'type' of 'value_info' is required but missing.")

def _value(v):
    dims = [NS(dim_param=d if isinstance(d, str) else "", dim_value=d if isinstance(d, int) else 0) for d in v["shape"]]
    return NS(name=v["name"], type=NS(tensor_type=NS(elem_type=v.get("type", 1), shape=NS(dim=dims))))

def load(path):
    with open(path) as fh:
        spec = json.load(fh)
    graph = NS(initializer=[NS(name=n, dims=d) for n, d in spec.get("initializers", {}).items()],
               input=[_value(v) for v in spec["inputs"]], output=[_value(v) for v in spec["outputs"]],
               node=[NS(op_type="Constant", attribute=[NS(name="value", t=NS(dims=d))]) for d in spec.get("constants", [])])
    return NS(graph=graph, broken=spec.get("broken", False))
"""

GOOD_MODEL = {"initializers": {"w1": [224, 64], "b1": [64], "w2": [64, 3], "b2": [3]},
              "inputs": [{"name": "obs", "shape": [1, 224]}], "outputs": [{"name": "action", "shape": [1, 3]}]}


@pytest.fixture
def fake_onnx(tmp_path):
    site = tmp_path / "fake-site" / "onnx"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(FAKE_ONNX)

    def validate(model: dict):
        path = tmp_path / "policy.onnx"
        path.write_text(json.dumps(model))
        return run_validator("onnx_policy.py", path, env={**os.environ, "PYTHONPATH": str(site.parent)})

    return validate


def test_onnx_validator_passes_a_small_policy_with_the_right_shapes(fake_onnx):
    done = fake_onnx(GOOD_MODEL)
    assert done.returncode == 0, done.stdout
    assert "PASS  14,595 parameters (< 250,000)" in done.stdout
    assert "PASS  input `obs` shape is [1, 224]" in done.stdout and "PASS  output `action` shape is [1, 3]" in done.stdout


@pytest.mark.parametrize("changes, message", [
    ({"initializers": {"w1": [224, 1200], "w2": [1200, 3]}}, "FAIL  272,400 parameters, must be fewer than 250,000"),
    ({"constants": [[250_000]]}, "FAIL  264,595 parameters"),
    ({"inputs": [{"name": "obs", "shape": ["batch", 224]}]}, "FAIL  input `obs` shape is ['batch', 224], expected [1, 224]"),
    ({"inputs": [{"name": "obs", "shape": [1, 224], "type": 7}]}, "FAIL  input `obs` element type is 7"),
    ({"inputs": [{"name": "obs", "shape": [1, 224]}, {"name": "h", "shape": [1, 8]}]},
     "FAIL  exactly one input expected, found 2 (obs, h)"),
    ({"outputs": [{"name": "action", "shape": [1, 4]}]}, "FAIL  output `action` shape is [1, 4], expected [1, 3]"),
    ({"outputs": []}, "FAIL  exactly one output expected, found 0 (none)"),
    ({"broken": True}, "is not a valid ONNX model: ValueError"),
])
def test_onnx_validator_fails_models_that_break_a_rule(fake_onnx, changes, message):
    done = fake_onnx({**GOOD_MODEL, **changes})
    assert done.returncode == 1, done.stdout
    assert message in done.stdout


def test_onnx_validator_ignores_weights_listed_as_inputs(fake_onnx):
    # Older ONNX IR versions list every initializer among the graph inputs too.
    model = {**GOOD_MODEL, "inputs": GOOD_MODEL["inputs"] + [{"name": "w1", "shape": [224, 64]}]}
    assert fake_onnx(model).returncode == 0


def test_onnx_validator_on_real_models(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def model(hidden: int, outputs: int = 3):
        weights = [helper.make_tensor("w1", TensorProto.FLOAT, [224, hidden], [0.0] * (224 * hidden)),
                   helper.make_tensor("w2", TensorProto.FLOAT, [hidden, outputs], [0.0] * (hidden * outputs))]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
        graph = helper.make_graph(nodes, "policy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 224])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs])], weights)
        path = tmp_path / f"policy-{hidden}-{outputs}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    assert run_validator("onnx_policy.py", model(64)).returncode == 0
    assert run_validator("onnx_policy.py", model(2000)).returncode == 1
    assert run_validator("onnx_policy.py", model(64, outputs=4)).returncode == 1
    junk = write(tmp_path, b"not a model", "junk.onnx")
    assert run_validator("onnx_policy.py", junk).returncode == 1
