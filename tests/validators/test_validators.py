"""The validators shipped in smrweb/validators/, run as the sandbox runs them: standalone scripts that\npass
good artifacts and fail bad ones with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from smrweb.sources import preflight

VALIDATORS = preflight.VALIDATORS_DIR


def run_validator(script: str, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(VALIDATORS / script), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


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


@pytest.mark.parametrize(
    "source, message",
    [
        ("def step(:\n    pass\n", "FAIL  does not compile at line 1"),
        ("def f():\n    pass\nreturn 1\n", "FAIL  does not compile at line 3: 'return' outside function"),
        (
            "def optimize():\n    pass\n",
            "FAIL  no top-level `Optimizer` (top-level functions and classes: optimize)",
        ),
        (
            "class Optimizer:\n    def zero_grad(self):\n        pass\n",
            "FAIL  class `Optimizer` has no `step` method",
        ),
        (
            "def Optimizer():\n    pass\n",
            "FAIL  `Optimizer` is a function, expected a class with a `step` method",
        ),
        (
            "if True:\n    class Optimizer:\n        def step(self):\n            pass\n",
            "FAIL  no top-level `Optimizer`",
        ),
        (b"# caf\xe9\nclass Optimizer: pass\n", "FAIL  not UTF-8: byte 5 cannot be decoded"),
        (b"x = 1\x00\n", "FAIL  does not compile"),
    ],
)
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
    done = run_validator(
        "onnx_policy.py",
        write(tmp_path, b"x", "policy.onnx"),
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
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
    dims = [NS(dim_param=d if isinstance(d, str) else "", dim_value=d if isinstance(d, int) else 0)
            for d in v["shape"]]
    return NS(name=v["name"], type=NS(tensor_type=NS(elem_type=v.get("type", 1), shape=NS(dim=dims))))

def load(path):
    with open(path) as fh:
        spec = json.load(fh)
    graph = NS(initializer=[NS(name=n, dims=d) for n, d in spec.get("initializers", {}).items()],
               input=[_value(v) for v in spec["inputs"]], output=[_value(v) for v in spec["outputs"]],
               node=[NS(op_type="Constant", attribute=[NS(name="value", t=NS(dims=d))])
                     for d in spec.get("constants", [])])
    return NS(graph=graph, broken=spec.get("broken", False))
"""


GOOD_MODEL = {
    "initializers": {"w1": [224, 64], "b1": [64], "w2": [64, 3], "b2": [3]},
    "inputs": [{"name": "obs", "shape": [1, 224]}],
    "outputs": [{"name": "action", "shape": [1, 3]}],
}


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
    assert (
        "PASS  input `obs` shape is [1, 224]" in done.stdout
        and "PASS  output `action` shape is [1, 3]" in done.stdout
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"initializers": {"w1": [224, 1200], "w2": [1200, 3]}},
            "FAIL  272,400 parameters, must be fewer than 250,000",
        ),
        ({"constants": [[250_000]]}, "FAIL  264,595 parameters"),
        (
            {"inputs": [{"name": "obs", "shape": ["batch", 224]}]},
            "FAIL  input `obs` shape is ['batch', 224], expected [1, 224]",
        ),
        ({"inputs": [{"name": "obs", "shape": [1, 224], "type": 7}]}, "FAIL  input `obs` element type is 7"),
        (
            {"inputs": [{"name": "obs", "shape": [1, 224]}, {"name": "h", "shape": [1, 8]}]},
            "FAIL  exactly one input expected, found 2 (obs, h)",
        ),
        (
            {"outputs": [{"name": "action", "shape": [1, 4]}]},
            "FAIL  output `action` shape is [1, 4], expected [1, 3]",
        ),
        ({"outputs": []}, "FAIL  exactly one output expected, found 0 (none)"),
        ({"broken": True}, "is not a valid ONNX model: ValueError"),
    ],
)
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
        weights = [
            helper.make_tensor("w1", TensorProto.FLOAT, [224, hidden], [0.0] * (224 * hidden)),
            helper.make_tensor("w2", TensorProto.FLOAT, [hidden, outputs], [0.0] * (hidden * outputs)),
        ]
        nodes = [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("MatMul", ["h", "w2"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes,
            "policy",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 224])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs])],
            weights,
        )
        path = tmp_path / f"policy-{hidden}-{outputs}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    assert run_validator("onnx_policy.py", model(64)).returncode == 0
    assert run_validator("onnx_policy.py", model(2000)).returncode == 1
    assert run_validator("onnx_policy.py", model(64, outputs=4)).returncode == 1
    junk = write(tmp_path, b"not a model", "junk.onnx")
    assert run_validator("onnx_policy.py", junk).returncode == 1
