"""Every cache key has one home, `core.cachekeys`: a module that reads or writes the cache (Django's `cache`
or `core.softcache`) takes the key from there, never spells it itself. The check follows a call's key
back through the module (a local variable, `self.key`, a dict or list of keys, a local key function, a
parameter to what the module's callers pass) to where it is made: a `cachekeys` call is fine, a string
literal, f-string or concatenation is not."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from smrweb.core import cachekeys

ROOT = Path(cachekeys.__file__).resolve().parents[2]
HOME = "smrweb/core/cachekeys.py"
CACHES = {"cache", "softcache"}
KEYED = {"get", "set", "add", "delete", "touch", "incr", "decr", "get_or_set", "has_key", "expire", "ttl"}
# A list of keys, or (set_many) a dict keyed by them.
MANY = {"get_many", "delete_many", "set_many", "add_many"}
# Modules still building keys by hand, and why. Each must still do so (else drop it here).
NOT_YET: set[str] = set()  # modules still building a key by hand, each to switch (none now)


class _Module:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.functions = {
            n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def scope(self, node: ast.AST) -> ast.AST:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return node
        return self.tree

    def assigned(self, scope: ast.AST, target) -> list[ast.expr]:
        """What `target` (a name, or self.<attr> anywhere in the module) is set to in `scope`."""
        where = self.tree if isinstance(target, tuple) else scope
        found = []
        for node in ast.walk(where):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for t in targets:
                if isinstance(target, str) and isinstance(t, ast.Name) and t.id == target:
                    found.append(value)
                elif isinstance(target, tuple) and isinstance(t, ast.Attribute) and t.attr == target[1]:
                    found.append(value)
        return found

    def passed(self, function: ast.AST, param: str) -> list[tuple[ast.expr, ast.AST]]:
        """What the module's calls of `function` pass as its parameter `param`, with the caller's scope."""
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return []
        names = [a.arg for a in function.args.args]
        if param not in names:
            return []
        index = names.index(param) - (names[:1] == ["self"])
        found = []
        for call in ast.walk(self.tree):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            direct = isinstance(func, ast.Name) and func.id == function.name
            method = isinstance(func, ast.Attribute) and func.attr == function.name
            if not (direct or method):
                continue
            value = next((k.value for k in call.keywords if k.arg == param), None)
            if value is None and 0 <= index < len(call.args):
                value = call.args[index]
            if value is not None:
                found.append((value, self.scope(call)))
        return found


def _is_home_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "cachekeys"
    )


def _hand_built(module: _Module, expr: ast.expr, scope: ast.AST, depth: int = 0) -> list[ast.expr]:
    """The places under `expr` where a key is spelled by hand (empty: every key comes from the home, or
    from a parameter/loop variable, which its caller's check covers)."""
    if depth > 8 or _is_home_call(expr):
        return []
    again = lambda e, s=scope: _hand_built(module, e, s, depth + 1)  # noqa: E731
    if isinstance(expr, (ast.JoinedStr, ast.BinOp)) or (
        isinstance(expr, ast.Constant) and isinstance(expr.value, str)
    ):
        return [expr]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        return [expr]
    if isinstance(expr, ast.Name):
        if values := module.assigned(scope, expr.id):
            return [bad for value in values for bad in again(value)]
        return [  # a parameter: what the module's callers pass for it
            bad for value, caller in module.passed(scope, expr.id) for bad in again(value, caller)
        ]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return [bad for value in module.assigned(scope, ("self", expr.attr)) for bad in again(value)]
    if isinstance(expr, ast.Subscript):  # keys[name]: the values of `keys`
        return [bad for bad in again(expr.value)]
    if isinstance(expr, ast.Call):
        func = expr.func
        own = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
        name = func.id if isinstance(func, ast.Name) else func.attr if own else ""
        if name in module.functions:
            local = module.functions[name]  # a local key function (or method): what it returns
            returns = [n.value for n in ast.walk(local) if isinstance(n, ast.Return) and n.value is not None]
            return [bad for value in returns for bad in _hand_built(module, value, local, depth + 1)]
        inner = [*expr.args]
        if isinstance(func, ast.Attribute) and func.attr in ("values", "keys", "items"):
            inner.append(func.value)
        return [bad for e in inner for bad in again(e)]
    if isinstance(expr, ast.Dict):
        return [bad for e in expr.values if e is not None for bad in again(e)]
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return [bad for e in expr.elts for bad in again(e)]
    if isinstance(expr, ast.DictComp):
        return again(expr.value, scope)
    if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return again(expr.elt, scope)
    if isinstance(expr, ast.Starred):
        return again(expr.value)
    return []  # a loop variable, a parameter no caller here passes, …


def hand_built_keys(source: str) -> list[int]:
    """Lines where `source` calls the cache with a key it spelled itself."""
    module = _Module(ast.parse(source))
    lines = []
    for call in ast.walk(module.tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args):
            continue
        receiver = call.func.value
        owner = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
        if owner not in CACHES or call.func.attr not in KEYED | MANY:
            continue
        key, scope = call.args[0], module.scope(call)
        if call.func.attr == "set_many" and _hand_built_dict_keys(module, key, scope):
            lines.append(call.lineno)
        elif call.func.attr != "set_many" and _hand_built(module, key, scope):
            lines.append(call.lineno)
    return lines


def _hand_built_dict_keys(module: _Module, expr: ast.expr, scope: ast.AST, depth: int = 0) -> list[ast.expr]:
    """`_hand_built` for the keys of a dict `set_many` is given: a literal's keys, a comprehension's key, both
    sides of `a | b`, what a name was assigned or passed (a parameter), what a local function returns."""
    if depth > 8:
        return []
    again = lambda e, s=scope: _hand_built_dict_keys(module, e, s, depth + 1)  # noqa: E731
    if isinstance(expr, ast.Dict):
        return [bad for k in expr.keys if k is not None for bad in _hand_built(module, k, scope)]
    if isinstance(expr, ast.DictComp):
        return _hand_built(module, expr.key, scope)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return again(expr.left) + again(expr.right)
    if isinstance(expr, ast.Name):
        if values := module.assigned(scope, expr.id):
            return [bad for value in values for bad in again(value)]
        return [bad for value, caller in module.passed(scope, expr.id) for bad in again(value, caller)]
    if isinstance(expr, ast.Call):
        func = expr.func
        own = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
        name = func.id if isinstance(func, ast.Name) else func.attr if own else ""
        if name in module.functions:
            local = module.functions[name]
            returns = [n.value for n in ast.walk(local) if isinstance(n, ast.Return) and n.value is not None]
            return [
                bad for value in returns for bad in _hand_built_dict_keys(module, value, local, depth + 1)
            ]
    return []


def _modules():
    for path in sorted((ROOT / "smrweb").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel != HOME and "/migrations/" not in rel:
            yield rel, path.read_text()


def test_no_module_outside_the_home_builds_a_cache_key_by_hand():
    found = {rel: lines for rel, text in _modules() if (lines := hand_built_keys(text))}
    assert set(found) - NOT_YET == set(), found
    assert NOT_YET <= set(found), "a module in NOT_YET takes its keys from the home now: drop it there"


@pytest.mark.parametrize(
    "source",
    [
        'cache.get(f"live:{scope}:{name}")',
        'softcache.set("alerts:swept-at", now, None)',
        'def f(run):\n    key = "turn:" + str(run.pk)\n    return softcache.get(key)',
        'class L:\n    def __init__(self):\n        self.key = f"lease:{x}"\n'
        "    def claim(self):\n        return cache.add(self.key, 1)",
        'def _key(n):\n    return f"clock:{n}"\ndef read(n):\n    return softcache.get(_key(n))',
        'def f(rs):\n    keys = {r: f"s:{r}" for r in rs}\n'
        "    return softcache.get_many(list(keys.values()))",
        'softcache.set_many({f"k:{r}": 1 for r in rs}, 60)',
        'def claim(key):\n    return softcache.add(f"{key}:lock", 1, 10, down=True)',
        'softcache.delete("x:{}".format(n))',
        'def _cached(key):\n    return softcache.get(key)\ndef page(a):\n    return _cached(f"preview:{a}")',
        'class D:\n    def _key(self, n):\n        return f"live:{n}"\n'
        "    def _recall(self, keys):\n        return softcache.get_many(keys)\n"
        "    def render(self, cards):\n        keys = {c: self._key(c) for c in cards}\n"
        "        return self._recall(list(keys.values()))",
        # a dict of renders passed on, joined with another: its keys
        'def keep(renders):\n    softcache.set_many(renders, 60)\nkeep({"a": 1} | {cachekeys.clock(2): 2})',
        "def keep(renders):\n    softcache.set_many(renders, 60, encode=z)\ndef f(n):\n"
        '    made = {f"row:{n}": 1}\n    keep(made)',
    ],
)
def test_the_check_finds_a_key_built_by_hand(source):
    assert hand_built_keys(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "cache.get(cachekeys.clock(n))",
        "def f(run):\n    key = cachekeys.turn_aggregates(run.pk)\n    return softcache.get(key)",
        "def _key(n):\n    return cachekeys.clock(n)\ndef read(n):\n    return softcache.get(_key(n))",
        "def f(rs):\n    keys = {r: cachekeys.clock(r) for r in rs}\n"
        "    return softcache.get_many(list(keys.values()))",
        "def recall(keys):\n    return softcache.get_many(keys)",
        "def recall(keys):\n    return softcache.get_many(keys)\nrecall([cachekeys.clock(1)])",
        'settings.get("x:y")',  # not the cache
        "def keep(renders):\n    softcache.set_many(renders, 60)\n"
        "def f(ns):\n    made = {cachekeys.clock(n): 1 for n in ns}\n"
        "    keep(made | {cachekeys.clock(0): 0})",
    ],
)
def test_keys_from_the_home_pass(source):
    assert hand_built_keys(source) == []


def test_the_kept_keys_are_those_a_running_deployment_holds():
    """The home changed no key: what a deployment has in Redis before the move is still found after it
    (the leases' and claims' strings matter; the caches' would only cost a miss)."""
    assert cachekeys.kept("run-conditions:3", "abc") == "kept:v1:run-conditions:3:abc"
    digest = hashlib.blake2s(b"3+,4-", digest_size=8).hexdigest()
    assert cachekeys.kept_project_summaries(True, "3+,4-") == f"project-summaries:1:{digest}"
    assert cachekeys.kept_board_bests(3, False) == "board-bests:3:0"
    assert cachekeys.turn_aggregates(7) == "turn-aggregates:v2:7"
    assert cachekeys.compare_series(7, 1.5, maximize=True, per_run=40) == "compare-series:v3:7:1.500000:1:40"
    assert cachekeys.preview("ab", 10, "p.py", "code", "text/x") == "preview:v1:ab:10:p.py:code:text/x"
    assert cachekeys.highlighted("ab", "p.py", "text/x") == "highlighted:v1:ab:p.py:text/x"
    assert cachekeys.clock(4) == "clock:4"
    assert cachekeys.live_claim(cachekeys.live_card("run-1", "budget", "v")) == "live:run-1:budget:v:lock"
    assert (
        cachekeys.run_lease("db", 2, "r9")
        == "smr-run-lease:" + __import__("hashlib").blake2b(b"db|2|r9", digest_size=12).hexdigest()
    )
    assert cachekeys.blob_pull("db", "ff") == "smr-blob-pull:db:ff"
    assert cachekeys.alerts_due("run", 5) == "alerts:due:run:5"
    assert cachekeys.alerts_swept_at() == "alerts:swept-at"
    assert cachekeys.verifying(5) == "smrweb:verifying:5"
    assert cachekeys.preflight("q") == "smrweb:preflight:q"
