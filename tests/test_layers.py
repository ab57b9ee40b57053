"""The layering, checked (review 2026-11-24, section 4.2 "Enforce the layering").

An AST walk over every module of smrweb/ (migrations excluded) builds the graph of imports: module-level
and function-local ones alike (a function-local import is still a dependency, it only runs later),
relative imports resolved. `from smrweb.tracking import services` is an edge to the module
`smrweb.tracking.services` when that is a module or package, else to the package `smrweb.tracking`. A name
imported from a package whose `__init__` re-exports it (`from .run import Run`) is an edge to the
submodule that the `__init__` takes it from, so a `models/` or `services/` package does not hide which
submodule depends on which. Third-party and stdlib imports are kept as edges too, under their dotted name.

The files are found with pathlib on every run: moving a module moves its edges; the only lists written
here are the layer rules below. Each rule is its own test, and its failure lists every offending edge as
`importer:line -> imported`.

Rules:
  1. no module cycle among smrweb modules (see `test_no_module_cycles` for how packages count);
  2. `smrweb.core` imports no smrweb app;
  3. `smrweb.tracking` (the domain) imports no adapter, face or tool, no Celery, no HTTP, no subprocess;
  4. the faces (`smrweb.api`, `smrweb.dashboard`) do not import each other, `smrweb.stack` or
     `smrweb.simulator`;
  5. the harness side (`smrweb.client`, `smrweb.cli`, `smrweb.simulator`, `smrweb.validators`) imports no
     Django and no other smrweb module;
  6. `smrweb.sources` does not import a face.
The last test feeds the same functions a small synthetic tree to prove each check can fail.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "smrweb"

# --- the layer rules --------------------------------------------------------------------------------

APPS = (
    "smrweb.tracking",
    "smrweb.sources",
    "smrweb.outbound",
    "smrweb.api",
    "smrweb.dashboard",
    "smrweb.stack",
    "smrweb.simulator",
)

CORE = ("smrweb.core",)
CORE_FORBIDDEN = APPS

TRACKING = ("smrweb.tracking",)
# Commands are entry points, like the faces: they may reach the sources (create_project checks a branch).
TRACKING_ENTRY_POINTS = ("smrweb.tracking.management.commands",)
TRACKING_FORBIDDEN = (
    "smrweb.sources",
    "smrweb.outbound",
    "smrweb.api",
    "smrweb.dashboard",
    "smrweb.stack",
    "smrweb.simulator",
    # No Celery (the library, or the project's Celery app), no HTTP, no subprocess, no progress bars.
    "smrweb.celery",
    "celery",
    "rest_framework",
    "django.http",
    "subprocess",
    "httpx",
    "requests",
    "tqdm",
    # No wire format either: OTLP decoding is an adapter (sources/otlp.py) and a face (api/otlp_wire.py).
    "google.protobuf",
    "opentelemetry",
)
TRACKING_ENTRY_POINTS_MAY = ("smrweb.sources",)

FACES = {
    "smrweb.api": ("smrweb.dashboard", "smrweb.stack", "smrweb.simulator"),
    "smrweb.dashboard": ("smrweb.api", "smrweb.stack", "smrweb.simulator"),
}

# The harness side runs without Django: `smrweb.client` (a module today, perhaps a package later),
# `smrweb.cli`, the simulator and the validator scripts. They may import each other, the stdlib and
# their own third-party dependencies, and nothing else of smrweb.
STANDALONE = ("smrweb.client", "smrweb.cli", "smrweb.rescore", "smrweb.simulator", "smrweb.validators")
# ...except `smrweb rescore`, which checks a bundle and runs its validator with the server's own code: the
# bundle format and the sandbox, both pure core modules without Django (issue 39). Only that module.
STANDALONE_MAY = {"smrweb.rescore": ("smrweb.core.bundles", "smrweb.core.sandbox")}
# ...but the simulator is also a Django app: its AppConfig and its `simulate_smr` command are the glue
# that lets `manage.py` start it, and may import Django (still not another smrweb module).
STANDALONE_DJANGO_GLUE = ("smrweb.simulator.apps", "smrweb.simulator.management")
STANDALONE_FORBIDDEN_EXTERNAL = ("django", "rest_framework", "celery")

SOURCES = ("smrweb.sources",)
SOURCES_FORBIDDEN = ("smrweb.api", "smrweb.dashboard")
# Requests smrweb makes on its own initiative (issue 35): no face either; and the raw guarded POST has
# one caller, the one answer classifier (a second copy of the retry rule would start there).
OUTBOUND = ("smrweb.outbound",)
OUTBOUND_FORBIDDEN = ("smrweb.api", "smrweb.dashboard")
RAW_POST_CALLER = "smrweb/outbound/http.py"


# --- the walk ---------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Edge:
    importer: str  # dotted module name
    path: str  # the importer's file, relative to the tree's root
    line: int
    target: str  # a smrweb module when `internal`, else the imported dotted name
    internal: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line} -> {self.target}"


@dataclass
class Tree:
    modules: dict[str, str]  # dotted name -> path relative to the root
    packages: set[str]  # the dotted names that are packages (an __init__.py, or a folder of modules)
    edges: list[Edge]


def under(name: str, prefixes) -> bool:
    """`name` is one of `prefixes` or inside one of them (`smrweb.api` is under `smrweb.api`, and
    `smrweb.api.views` too, but `smrweb.apidocs` is not)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def discover(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name; migrations are left out."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root)
        if "migrations" in rel.parts or "__pycache__" in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str | None:
    """The dotted name a relative import (`level` dots) means inside `module`."""
    if level == 0:
        return name
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    if not base:
        return None  # beyond the top-level package: Python refuses it too
    return ".".join(base + ([name] if name else []))


def build_tree(sources: dict[str, str], paths: dict[str, str]) -> Tree:
    """The import graph of `sources` (dotted name -> source text). `paths` names each module's file."""
    modules = dict(paths)
    packages = {m for m, p in paths.items() if p.endswith("__init__.py")}
    # Namespace packages (a folder without __init__.py, like smrweb/validators/) are packages too.
    for m in list(modules):
        parts = m.split(".")
        for i in range(1, len(parts)):
            packages.add(".".join(parts[:i]))
    known = set(modules) | packages
    trees = {m: ast.parse(src, filename=paths[m]) for m, src in sources.items()}

    def owner(name: str) -> str | None:
        """The longest prefix of `name` that is a smrweb module or package (None outside smrweb)."""
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if candidate in known:
                return candidate
        return None

    # What each package's __init__ re-exports: name -> (the module it comes from, the name there).
    reexports: dict[str, dict[str, tuple[str, str]]] = {}
    for m, tree in trees.items():
        if m not in packages:
            continue
        table = reexports.setdefault(m, {})
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                base = _absolute(m, True, node.level, node.module)
                if base is None or owner(base) is None:
                    continue
                for alias in node.names:
                    if alias.name != "*":
                        table[alias.asname or alias.name] = (base, alias.name)

    def resolve_from(base: str, name: str, depth: int = 0) -> str | None:
        """The smrweb module that `from base import name` depends on."""
        if f"{base}.{name}" in known:
            return f"{base}.{name}"
        if base in packages and name in reexports.get(base, {}) and depth < 10:
            source, original = reexports[base][name]
            # Only a re-export from the package's own submodules is followed: a name the package takes
            # from elsewhere is still a dependency on the package (its __init__ runs that import).
            if source != base and under(source, [base]):
                return resolve_from(source, original, depth + 1) if source in packages else owner(source)
        return owner(base)

    def imports(m: str, tree: ast.Module):
        """(line, target, internal) for every import statement of module `m`, wherever it stands."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    inside = owner(alias.name)
                    yield node.lineno, inside or alias.name, inside is not None
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(m, m in packages, node.level, node.module)
                if base is None:
                    continue
                if owner(base) is None:
                    # Outside smrweb: `from django.http import X` is django.http, and `from django import
                    # http` is django.http too (a submodule or not, that is what the rules name).
                    for alias in node.names:
                        yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}", False
                    continue
                for alias in node.names:
                    target = owner(base) if alias.name == "*" else resolve_from(base, alias.name)
                    if target is not None:
                        yield node.lineno, target, True

    edges = {
        Edge(m, paths[m], line, target, internal)
        for m, tree in trees.items()
        for line, target, internal in imports(m, tree)
    }
    return Tree(modules, packages, sorted(edges))


def load_tree(root: Path = ROOT, package: str = PACKAGE) -> Tree:
    files = discover(root, package)
    return build_tree(
        {m: p.read_text(encoding="utf-8") for m, p in files.items()},
        {m: str(p.relative_to(root)) for m, p in files.items()},
    )


# --- the checks (pure functions of a Tree, so the self-test can feed them a synthetic one) -------------


def _hits(edge: Edge, forbidden) -> bool:
    return under(edge.target, forbidden)


def forbidden_edges(tree: Tree, importers, forbidden, *, exempt=(), exempt_may=()) -> list[Edge]:
    """Edges from a module under `importers` to anything under `forbidden`. A module under `exempt` may
    still import what is under `exempt_may`."""
    bad = []
    for edge in tree.edges:
        if not under(edge.importer, importers) or not _hits(edge, forbidden):
            continue
        if under(edge.importer, exempt) and _hits(edge, exempt_may):
            continue
        bad.append(edge)
    return bad


def cycle_graph(tree: Tree) -> dict[str, dict[str, Edge]]:
    """Module -> {imported module: the first edge}, for smrweb modules only, without self-imports and
    without edges from a package's `__init__` to its own submodules (see `test_no_module_cycles`)."""
    graph: dict[str, dict[str, Edge]] = {m: {} for m in tree.modules}
    for edge in tree.edges:
        if not edge.internal or edge.target == edge.importer:
            continue
        if edge.importer in tree.packages and under(edge.target, [edge.importer]):
            continue
        if edge.target not in tree.modules:
            continue  # a namespace package: it has no code of its own to be part of a cycle
        graph[edge.importer].setdefault(edge.target, edge)
    return graph


def strongly_connected(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative, so no recursion limit), the ones with more
    than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def shortest_cycle(graph: dict[str, dict[str, Edge]], start: str, members: set[str]) -> list[Edge]:
    """The shortest cycle through `start` inside one component, as its edges."""
    came: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child, edge in sorted(graph[node].items()):
            if child not in members:
                continue
            if child == start:
                path = [edge]
                while node != start:
                    path.append(came[node])
                    node = came[node].importer
                return path[::-1]
            if child not in came:
                came[child] = edge
                queue.append(child)
    return []


def cycles(tree: Tree) -> list[tuple[list[str], list[list[Edge]], list[Edge]]]:
    """Each component: (its modules, a shortest cycle through each of them without repeats, every edge
    inside it)."""
    graph = cycle_graph(tree)
    out = []
    for component in strongly_connected(graph):
        members = set(component)
        paths, seen = [], set()
        for module in component:
            path = shortest_cycle(graph, module, members)
            key = frozenset((e.importer, e.target) for e in path)
            if path and key not in seen:
                seen.add(key)
                paths.append(path)
        inside = sorted(
            e
            for e in tree.edges
            if e.internal and e.importer in members and e.target in members and e.target in graph[e.importer]
        )
        out.append((component, paths, inside))
    return out


def describe_cycles(found) -> str:
    lines = []
    for component, paths, inside in found:
        lines.append(f"cycle among {', '.join(component)}:")
        for path in paths:
            lines.append("  " + " -> ".join([path[0].importer] + [e.target for e in path]))
            lines.extend(f"      {e}" for e in path)
        lines.append("  every import inside it:")
        lines.extend(f"    {e}" for e in inside)
    return "\n".join(lines)


def describe(edges: list[Edge], rule: str) -> str:
    return f"{rule} — {len(edges)} offending import(s):\n" + "\n".join(f"  {e}" for e in edges)


# The rules as functions of a tree: each returns the offending edges.


def core_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(tree, CORE, CORE_FORBIDDEN)


def tracking_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(
        tree, TRACKING, TRACKING_FORBIDDEN, exempt=TRACKING_ENTRY_POINTS, exempt_may=TRACKING_ENTRY_POINTS_MAY
    )


def face_violations(tree: Tree) -> list[Edge]:
    return sorted(e for face, forbidden in FACES.items() for e in forbidden_edges(tree, (face,), forbidden))


def standalone_violations(tree: Tree) -> list[Edge]:
    bad = []
    for edge in tree.edges:
        if not under(edge.importer, STANDALONE):
            continue
        if edge.internal:
            allowed = STANDALONE_MAY.get(edge.importer, ())
            if not under(edge.target, STANDALONE) and edge.target not in allowed:
                bad.append(edge)
        elif _hits(edge, STANDALONE_FORBIDDEN_EXTERNAL) and not under(edge.importer, STANDALONE_DJANGO_GLUE):
            bad.append(edge)
    return bad


def sources_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(tree, SOURCES, SOURCES_FORBIDDEN)


def outbound_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(tree, OUTBOUND, OUTBOUND_FORBIDDEN)


def raw_post_callers(root: Path) -> list[str]:
    """Files that call `core.outbound.post` (as `outbound.post(...)` or an imported `post`), as path:line."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "smrweb/core/outbound.py":
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        imported_post = any(
            isinstance(n, ast.ImportFrom)
            and n.module == "smrweb.core.outbound"
            and any(a.name == "post" for a in n.names)
            for n in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "post"
                and isinstance(f.value, ast.Name)
                and f.value.id == "outbound"
            ) or (imported_post and isinstance(f, ast.Name) and f.id == "post"):
                found.append(f"{rel}:{node.lineno}")
    return found


# --- the tests on the real tree -----------------------------------------------------------------------

TREE = load_tree()


def test_the_walk_finds_the_tree():
    """A guard against a walk that finds nothing and so passes everything."""
    assert "smrweb.tracking" in TREE.packages
    assert len(TREE.modules) > 50
    assert sum(e.internal for e in TREE.edges) > 100
    assert not any("migrations" in m for m in TREE.modules)


def test_no_module_cycles():
    """No two distinct smrweb modules import each other, directly or through others, at module level or
    inside a function (a function-local import only postpones the cycle; it does not remove it).

    How packages count: a package's `__init__` is a module like any other, with one exception — its
    imports of its own submodules are not edges here. An `__init__` that re-exports (`from .run import
    Run`) runs its submodules; a submodule that then imports the package back (for a sibling, or to call
    `services.verb()` so that tests can patch it) depends on it, and counting both directions would make
    every re-exporting package a "cycle" with each of its submodules although no submodule depends on
    another. Ignoring the `__init__` -> own submodule direction keeps what matters: a cycle between
    distinct submodules. And because a name imported from a re-exporting package is resolved to the
    submodule it comes from, `run.py -> models (for Scenario)` and `scenario.py -> models (for Run)` are
    still seen as `run <-> scenario`."""
    found = cycles(TREE)
    assert not found, f"{len(found)} import cycle(s):\n" + describe_cycles(found)


def test_core_imports_no_app():
    """smrweb.core is pure helpers (hc/lib): Django and the stdlib, never a smrweb app."""
    bad = core_violations(TREE)
    assert not bad, describe(bad, f"core must not import {', '.join(CORE_FORBIDDEN)}")


def test_tracking_imports_no_adapter_face_celery_http_or_subprocess():
    """smrweb.tracking holds the data, the one write path and the reads: no adapter (sources), no face,
    no tool, no Celery (neither the library nor smrweb.celery), no HTTP, no subprocess, no tqdm, no OTLP
    wire format.
    Its management commands are entry points and may import smrweb.sources."""
    bad = tracking_violations(TREE)
    assert not bad, describe(bad, f"tracking must not import {', '.join(TRACKING_FORBIDDEN)}")


def test_faces_do_not_import_each_other():
    """smrweb.api and smrweb.dashboard share what they need through tracking/core, never through each
    other, and neither reaches into the stack supervisor or the simulator."""
    bad = face_violations(TREE)
    assert not bad, describe(bad, "faces must not import each other, smrweb.stack or smrweb.simulator")


def test_harness_side_imports_no_django_and_no_app():
    """The client, the CLI, the simulator and the validators run where Django is not installed (a
    harness, a sandbox). They import each other, the stdlib and their own dependencies only. The
    simulator's AppConfig and command may import Django, but no other smrweb module either."""
    bad = standalone_violations(TREE)
    assert not bad, describe(bad, f"{', '.join(STANDALONE)} must import no Django and no other smrweb module")


def test_sources_import_no_face():
    bad = sources_violations(TREE)
    assert not bad, describe(bad, f"sources must not import {', '.join(SOURCES_FORBIDDEN)}")


def test_outbound_imports_no_face():
    bad = outbound_violations(TREE)
    assert not bad, describe(bad, f"outbound must not import {', '.join(OUTBOUND_FORBIDDEN)}")


def test_the_raw_post_has_one_caller():
    """Every POST to a user-given address goes through `outbound.http.post`, which classifies the answer
    by the one retry rule; a second caller of `core.outbound.post` would be a second rule."""
    callers = raw_post_callers(ROOT)
    assert [c.split(":")[0] for c in callers] == [RAW_POST_CALLER], callers


# --- the checks can fail ------------------------------------------------------------------------------

SYNTHETIC = {
    "smrweb/__init__.py": "",
    "smrweb/core/__init__.py": "",
    "smrweb/core/links.py": "import os\n\ndef f():\n    from smrweb.tracking.models import Artifact\n",
    "smrweb/tracking/__init__.py": "",
    "smrweb/tracking/tasks.py": "from celery import shared_task\nfrom ..sources import rollback\n",
    "smrweb/tracking/scenarios.py": "import subprocess\nfrom django import http\n"
    "import opentelemetry.proto\n",
    "smrweb/tracking/models/__init__.py": "from .run import Run\nfrom .scenario import Scenario\n",
    "smrweb/tracking/models/run.py": "from smrweb.tracking.models import Scenario\n",
    "smrweb/tracking/models/scenario.py": "def f():\n    from . import Run\n",
    "smrweb/tracking/services/__init__.py": "from .ingest import ingest_events\n",
    "smrweb/tracking/services/ingest.py": "from smrweb.tracking import services\nfrom tqdm import tqdm\n",
    "smrweb/tracking/management/__init__.py": "",
    "smrweb/tracking/management/commands/__init__.py": "",
    "smrweb/tracking/management/commands/create_project.py": "from smrweb.sources.git import check_branch\n",
    "smrweb/sources/__init__.py": "",
    "smrweb/sources/git.py": "def sync_project():\n    from smrweb.sources import sync\n",
    "smrweb/sources/sync.py": "from . import git\nfrom smrweb.api import errors\n",
    "smrweb/sources/rollback.py": "",
    "smrweb/api/__init__.py": "",
    "smrweb/api/errors.py": "",
    "smrweb/dashboard/__init__.py": "",
    "smrweb/dashboard/views.py": "from smrweb.api.errors import json_error\nimport smrweb.simulator.world\n",
    "smrweb/simulator/__init__.py": "",
    "smrweb/simulator/world.py": "import json\nfrom smrweb import client\n",
    "smrweb/simulator/apps.py": "from django.apps import AppConfig\n",
    "smrweb/client.py": "import httpx\nfrom django.conf import settings\n",
    "smrweb/validators/check.py": "from smrweb.core import links\n",
}


def test_the_checks_report_what_they_should(tmp_path):
    for rel, text in SYNTHETIC.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    tree = load_tree(tmp_path)

    def pairs(edges):
        return {(e.path, e.line, e.target) for e in edges}

    found = cycles(tree)
    assert [component for component, _, _ in found] == [
        ["smrweb.sources.git", "smrweb.sources.sync"],
        ["smrweb.tracking.models.run", "smrweb.tracking.models.scenario"],
    ]
    text = describe_cycles(found)
    assert "smrweb/sources/git.py:2 -> smrweb.sources.sync" in text
    assert "smrweb/sources/sync.py:1 -> smrweb.sources.git" in text
    assert "smrweb/tracking/models/run.py:1 -> smrweb.tracking.models.scenario" in text
    assert "smrweb/tracking/models/scenario.py:2 -> smrweb.tracking.models.run" in text
    # services/__init__ -> ingest -> services (the package, to call siblings through it) is not a cycle.
    assert "services" not in text

    assert pairs(core_violations(tree)) == {("smrweb/core/links.py", 4, "smrweb.tracking.models")}
    assert pairs(tracking_violations(tree)) == {
        ("smrweb/tracking/tasks.py", 1, "celery.shared_task"),
        ("smrweb/tracking/tasks.py", 2, "smrweb.sources.rollback"),
        ("smrweb/tracking/scenarios.py", 1, "subprocess"),
        ("smrweb/tracking/scenarios.py", 2, "django.http"),
        ("smrweb/tracking/scenarios.py", 3, "opentelemetry.proto"),
        ("smrweb/tracking/services/ingest.py", 2, "tqdm.tqdm"),
    }  # and not the command's smrweb.sources.git
    assert pairs(face_violations(tree)) == {
        ("smrweb/dashboard/views.py", 1, "smrweb.api.errors"),
        ("smrweb/dashboard/views.py", 2, "smrweb.simulator.world"),
    }
    assert pairs(standalone_violations(tree)) == {
        ("smrweb/client.py", 2, "django.conf.settings"),
        ("smrweb/validators/check.py", 1, "smrweb.core.links"),
    }  # not the simulator's AppConfig, nor world -> client
    assert pairs(sources_violations(tree)) == {("smrweb/sources/sync.py", 2, "smrweb.api.errors")}

    message = describe(core_violations(tree), "core")
    assert "smrweb/core/links.py:4 -> smrweb.tracking.models" in message


# --- rooms inside tracking (issue 35: the filters <-> queries circle) ---------------------------------

# A room is a direct child of smrweb.tracking (models, services, queries, filters, events, …). Two rooms
# that import each other are one room in all but name. The one pair still allowed is services <-> queries
# (rollups build the timeline's memo, review reads blobs: review 2026-11-28 §1.3); any other circle, such
# as filters <-> queries (filters read queries.budget; queries took STALLED from filters), fails.
ROOM_CIRCLES_ALLOWED = [["smrweb.tracking.queries", "smrweb.tracking.services"]]


def room_of(module: str, package: str = "smrweb.tracking") -> str | None:
    parts = module.split(".")
    depth = package.count(".") + 2
    return ".".join(parts[:depth]) if under(module, [package]) and len(parts) >= depth else None


def room_circles(tree: Tree, package: str = "smrweb.tracking") -> list[list[str]]:
    """Each set of rooms of `package` that import each other, with its edges as `importer:line -> target`."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in tree.edges:
        a, b = room_of(edge.importer, package), room_of(edge.target, package)
        if not edge.internal or a is None or b is None or a == b:
            continue
        graph.setdefault(a, {}).setdefault(b, edge)
        graph.setdefault(b, {})
    return strongly_connected(graph)


def test_no_circle_between_tracking_rooms():
    found = [c for c in room_circles(TREE) if c not in ROOM_CIRCLES_ALLOWED]
    lines = [
        str(e)
        for c in found
        for e in TREE.edges
        if e.internal
        and room_of(e.importer) in c
        and room_of(e.target) in c
        and room_of(e.importer) != room_of(e.target)
    ]
    assert not found, f"rooms of smrweb.tracking importing each other: {found}\n" + "\n".join(lines)


def test_the_room_check_reports_a_circle(tmp_path):
    files = {
        "smrweb/__init__.py": "",
        "smrweb/tracking/__init__.py": "",
        "smrweb/tracking/filters.py": "from smrweb.tracking.queries import budget\n",
        "smrweb/tracking/queries/__init__.py": "",
        "smrweb/tracking/queries/budget.py": "",
        "smrweb/tracking/queries/projects.py": "from smrweb.tracking.filters import STALLED\n",
        "smrweb/tracking/models.py": "",
        "smrweb/tracking/events.py": "from smrweb.tracking import models\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert room_circles(load_tree(tmp_path)) == [["smrweb.tracking.filters", "smrweb.tracking.queries"]]


# --- module size (issue 35: god modules) ----------------------------------------------------------------

# No tracking module over this many lines: a module past it holds more than one job (services/alerts.py
# was 1,066 lines in three banners). The two below predate the rule and were not split with it; each may
# shrink but not grow (lower its number when it does; drop it once it is under the limit).
TRACKING_MAX_LINES = 600
TRACKING_OVER_THE_LIMIT = {
    "smrweb/tracking/services/submissions.py": 768,
    "smrweb/tracking/queries/timeline.py": 719,
}


def oversized(root: Path = ROOT, package: str = "smrweb/tracking") -> dict[str, int]:
    """Modules of `package` (migrations excluded) longer than the limit, or than their own allowance."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/migrations/" in rel:
            continue
        lines = len(path.read_text().splitlines())
        if lines > TRACKING_OVER_THE_LIMIT.get(rel, TRACKING_MAX_LINES):
            found[rel] = lines
    return found


def test_no_tracking_module_over_600_lines():
    found = oversized()
    assert not found, f"tracking modules over {TRACKING_MAX_LINES} lines (or their allowance): {found}"


def test_the_size_check_reports_a_long_module(tmp_path):
    (tmp_path / "smrweb/tracking/services").mkdir(parents=True)
    (tmp_path / "smrweb/tracking/services/alerts.py").write_text("x = 1\n" * 1066)
    (tmp_path / "smrweb/tracking/services/runs.py").write_text("x = 1\n" * 600)
    (tmp_path / "smrweb/tracking/migrations").mkdir()
    (tmp_path / "smrweb/tracking/migrations/0001_initial.py").write_text("x = 1\n" * 2000)
    assert oversized(tmp_path) == {"smrweb/tracking/services/alerts.py": 1066}


# --- one tasks module above the ways in and the ways out (issue 35, review 2026-11-28 section 6) ----------

# Every Celery task lives in smrweb/tasks.py, above both packages: the tasks chain across them (a sync
# queues an alert evaluation, the stale-action sweep re-queues dispatches), so a tasks module inside either
# would close a circle. `sources` is ways in only: it neither sends (outbound) nor queues (the tasks); it
# may read the Celery app's lanes (opsmetrics reports queue depth). `outbound` sends and returns an outcome;
# the task decides to retry, so outbound queues nothing. `tracking` vets a user-given address once, at save
# (services/projects.check_outbound_url); every send goes through `outbound`.
TASKS = "smrweb.tasks"
SOURCES_WAYS_IN_FORBIDDEN = ("smrweb.outbound", TASKS)
OUTBOUND_TASKS_FORBIDDEN = (TASKS, "smrweb.celery", "celery")
TRACKING_RAW_OUTBOUND = ("smrweb.core.outbound",)
TRACKING_RAW_OUTBOUND_MAY = ("smrweb.tracking.services.projects",)


def sources_ways_in_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(tree, SOURCES, SOURCES_WAYS_IN_FORBIDDEN)


def outbound_task_violations(tree: Tree) -> list[Edge]:
    return forbidden_edges(tree, OUTBOUND, OUTBOUND_TASKS_FORBIDDEN)


def tracking_raw_outbound_violations(tree: Tree) -> list[Edge]:
    return [
        e
        for e in forbidden_edges(tree, TRACKING, TRACKING_RAW_OUTBOUND)
        if not under(e.importer, TRACKING_RAW_OUTBOUND_MAY)
    ]


def stray_task_modules(tree: Tree) -> list[str]:
    """Modules named `tasks` anywhere but the one home (a `sources/tasks.py` façade would be one)."""
    return sorted(m for m in tree.modules if "tasks" in m.split(".") and not under(m, [TASKS]))


def test_one_tasks_module():
    assert TASKS in TREE.modules
    assert not stray_task_modules(TREE), "every Celery task lives in smrweb/tasks.py"


def test_sources_are_ways_in_only():
    bad = sources_ways_in_violations(TREE)
    assert not bad, describe(bad, f"sources must not import {', '.join(SOURCES_WAYS_IN_FORBIDDEN)}")


def test_outbound_queues_no_task():
    bad = outbound_task_violations(TREE)
    assert not bad, describe(bad, f"outbound must not import {', '.join(OUTBOUND_TASKS_FORBIDDEN)}")


def test_tracking_reaches_core_outbound_only_to_vet_a_url():
    bad = tracking_raw_outbound_violations(TREE)
    assert not bad, describe(bad, f"only {', '.join(TRACKING_RAW_OUTBOUND_MAY)} may import core.outbound")
    # The one exception is real (else it is a stale allowance): the vetting at save.
    assert any(
        e.importer in TRACKING_RAW_OUTBOUND_MAY and under(e.target, TRACKING_RAW_OUTBOUND) for e in TREE.edges
    )


def test_the_task_rules_report_what_they_should(tmp_path):
    files = {
        "smrweb/__init__.py": "",
        "smrweb/celery.py": "",
        "smrweb/tasks.py": "from smrweb.sources import sync\nfrom smrweb.outbound import dispatch\n",
        "smrweb/core/__init__.py": "",
        "smrweb/core/outbound.py": "",
        "smrweb/sources/__init__.py": "",
        "smrweb/sources/sync.py": "from smrweb.outbound import dispatch\n\n"
        "def f():\n    from smrweb import tasks\n",
        "smrweb/sources/opsmetrics.py": "from smrweb.celery import LANES\n",
        "smrweb/sources/tasks.py": "from smrweb.tasks import *\n",
        "smrweb/outbound/__init__.py": "",
        "smrweb/outbound/dispatch.py": "from celery import shared_task\n"
        "from smrweb.tasks import sync_project\nfrom smrweb.sources import sync\n",
        "smrweb/outbound/alerts.py": "import smrweb.celery\n",
        "smrweb/tracking/__init__.py": "",
        "smrweb/tracking/services/__init__.py": "",
        "smrweb/tracking/services/projects.py": "from smrweb.core.outbound import vet\n",
        "smrweb/tracking/services/rollbacks.py": "def f():\n    from smrweb.core import outbound\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    tree = load_tree(tmp_path)

    def pairs(edges):
        return {(e.path, e.line, e.target) for e in edges}

    assert stray_task_modules(tree) == ["smrweb.sources.tasks"]
    assert pairs(sources_ways_in_violations(tree)) == {
        ("smrweb/sources/sync.py", 1, "smrweb.outbound.dispatch"),
        ("smrweb/sources/sync.py", 4, "smrweb.tasks"),
        ("smrweb/sources/tasks.py", 1, "smrweb.tasks"),
    }  # not opsmetrics reading the lanes
    assert pairs(outbound_task_violations(tree)) == {
        ("smrweb/outbound/dispatch.py", 1, "celery.shared_task"),
        ("smrweb/outbound/dispatch.py", 2, "smrweb.tasks"),
        ("smrweb/outbound/alerts.py", 1, "smrweb.celery"),
    }  # not outbound calling a source's connector
    assert pairs(tracking_raw_outbound_violations(tree)) == {
        ("smrweb/tracking/services/rollbacks.py", 2, "smrweb.core.outbound")
    }  # not the vetting at save
