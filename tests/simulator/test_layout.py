"""The simulator's world and HTTP server import only the standard library and the simulator itself
(no Django, no other smrweb app): benchmarks and the harness side load them without settings."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import smrweb.simulator

ROOT = Path(smrweb.simulator.__file__).parent
MODULES = sorted([*ROOT.glob("world/*.py"), *ROOT.glob("server/*.py"), ROOT / "faults.py"])


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
    return names


def test_world_and_server_import_only_the_stdlib_and_the_simulator():
    assert len(MODULES) > 10
    outside = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in MODULES
        for name in imported(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith("smrweb.simulator")
        and name != "__future__"
    }
    assert not outside
