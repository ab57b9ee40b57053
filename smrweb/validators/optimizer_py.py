#!/usr/bin/env python3
"""Validate `submission/optimizer.py` for the optimizer hill-climb without running it: at most 256 KiB,
UTF-8, compiles, and defines the entry point the harness calls.

    python3 optimizer_py.py [--entry Optimizer.step] [--max-bytes 262144] path/to/optimizer.py

The entry point is `Class.method` (a top-level class defining that method, itself or through a base
class defined earlier in the same file) or `name` (a top-level function or class). The default,
`Optimizer.step`, is what the hill-climb harness expects: it builds `Optimizer(params, **hparams)` and
calls `step()` once per training step, like a `torch.optim` optimizer.

Exit 0: passes. Exit 1: fails (or the file is missing). Exit 2: bad arguments.

A standalone script on purpose: a sandbox runs it as an argument list with a scrubbed environment, where
smrweb itself is not importable. Standard library only. The source is parsed with `ast` and compiled,
never imported or executed: a submission's top-level code must not run during validation.
"""

from __future__ import annotations

import argparse
import ast
import sys

DEFAULT_ENTRY, DEFAULT_MAX_BYTES = "Optimizer.step", 256 * 1024
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _methods(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: frozenset = frozenset()) -> set[str]:
    """Method names of a class, including those of its bases defined in the same file."""
    names = {n.name for n in cls.body if isinstance(n, FUNCTIONS)}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
            names |= _methods(classes[base.id], classes, seen | {cls.name})
    return names


def find_entry(tree: ast.Module, entry: str) -> tuple[bool, str]:
    """Whether the module defines `entry` at top level, and what was found instead when it does not."""
    top = {n.name: n for n in tree.body if isinstance(n, (*FUNCTIONS, ast.ClassDef))}
    classes = {name: n for name, n in top.items() if isinstance(n, ast.ClassDef)}
    owner, _, method = entry.partition(".")
    if owner not in top:
        found = ", ".join(sorted(top)) or "nothing"
        return False, f"no top-level `{owner}` (top-level functions and classes: {found})"
    if not method:
        return True, f"defines `{owner}`"
    if owner not in classes:
        return False, f"`{owner}` is a function, expected a class with a `{method}` method"
    if method not in _methods(classes[owner], classes):
        return False, f"class `{owner}` has no `{method}` method"
    return True, f"defines `{entry}`"


def check(path: str, entry: str, max_bytes: int) -> list[tuple[bool, str]]:
    """(ok, message) for every rule, stopping at the first one later rules depend on."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return [(False, f"{path}: no such file")]
    except OSError as exc:
        return [(False, f"{path}: cannot be read ({exc.strerror})")]
    if len(data) > max_bytes:
        return [(False, f"larger than {max_bytes:,} bytes")]
    results = [(True, f"{len(data):,} bytes (at most {max_bytes:,})")]
    try:
        source = data.decode("utf-8-sig")  # a BOM is valid in Python source
    except UnicodeDecodeError as exc:
        return results + [(False, f"not UTF-8: byte {exc.start} cannot be decoded")]
    results.append((True, "UTF-8"))
    try:
        compile(source, path, "exec", dont_inherit=True)
        tree = ast.parse(source, path)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes in the source
        where = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        return results + [(False, f"does not compile{where}: {getattr(exc, 'msg', exc)}")]
    results.append((True, "compiles"))
    return results + [find_entry(tree, entry)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument(
        "--entry", default=DEFAULT_ENTRY, help="`Class.method` or `name` (default %(default)s)"
    )
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on bad arguments
        return 0 if exc.code == 0 else 2
    if not all(part.isidentifier() for part in args.entry.split(".")) or args.entry.count(".") > 1:
        print(f"--entry must be `name` or `Class.method`, not {args.entry!r}", file=sys.stderr)
        return 2
    results = check(args.path, args.entry, args.max_bytes)
    for ok, message in results:
        print(f"{'PASS' if ok else 'FAIL'}  {message}")
    passed = all(ok for ok, _ in results)
    print(f"{'valid' if passed else 'invalid'}: {args.path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
