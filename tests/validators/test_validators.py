"""The validators shipped in smrweb/validators/, run as the sandbox runs them: standalone scripts that\npass
good artifacts and fail bad ones with the reason."""

from __future__ import annotations

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


@pytest.mark.parametrize("package", ["onnx", "onnxruntime", "numpy"])
def test_onnx_validator_cannot_run_without_its_packages(tmp_path, package):
    # A package that fails to import stands in for "not installed", even where it is. (The validator on
    # real models, in the sandbox: test_onnx_policy.py.)
    fake = tmp_path / "site" / package
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ImportError('No module named {package}')\n")
    done = run_validator(
        "onnx_policy.py",
        write(tmp_path, b"x", "policy.onnx"),
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert done.returncode == 2
    assert f"CANNOT RUN  python package `{package}` is not installed" in done.stdout
    assert f"pip install {package}" in done.stdout
    assert run_validator("onnx_policy.py").returncode == 2  # no model named
