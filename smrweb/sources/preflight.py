"""Scenario preflight: is a scenario complete and consistent, and does the machine running this (a
Celery worker, see `smrweb.tasks.preflight_scenario`) have what its validator needs?

Commands are argument lists executed without a shell (by `core.sandbox`). Placeholders are
substituted inside any argument when a command runs:

    {artifact}    the absolute path of the artifact being checked (exactly once in a validator command)
    {validators}  the directory of the validators shipped with smrweb (`smrweb/validators`), wherever
                  this installation lives; the scripts there are standalone (standard library plus what
                  the scenario's toolchains declare), so the scrubbed sandbox runs them without smrweb
    {python}      the worker's own interpreter; {workdir} the sandbox's temporary directory

e.g. `["python3", "{validators}/onnx_policy.py", "{artifact}"]`.

Required toolchains are program names (`python3`, `cargo`) or `python:<module>`, a package the
validator's interpreter can import. Preflight looks them up exactly as a validator will see them: on
the sandbox's PATH and with its environment (`core.sandbox.scrubbed_env`), not the worker's own, so
`python3` is the worker's interpreter and a program only on a user's PATH counts as missing.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from smrweb.core.sandbox import scrubbed_env
from smrweb.tracking.models import ArtifactKind, Direction, Scenario

VALIDATORS_DIR = Path(__file__).resolve().parent.parent / "validators"


PLACEHOLDERS = ("artifact", "validators", "python", "workdir")


PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")


SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "cmd", "cmd.exe", "powershell", "pwsh"}


SHELL_SYNTAX = re.compile(r"&&|\|\||[|;`<>]|\$\(|\$\{")


PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")


PROGRAM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


# Kinds a path's extension must agree with (both ways); file, log and other go with any name.
KIND_EXTENSIONS = {
    ArtifactKind.ONNX_MODEL: (".onnx",),
    ArtifactKind.PYTHON_SOURCE: (".py",),
    ArtifactKind.ARCHIVE: (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".zip"),
}


GENERIC_KINDS = {ArtifactKind.FILE, ArtifactKind.OTHER}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    group: str  # complete | consistent | worker


@dataclass
class PreflightReport:
    scenario: str
    worker: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "ok": self.ok,
            "worker": self.worker,
            "checks": [asdict(c) for c in self.checks],
        }


def resolve_command(
    command: list[str], *, artifact: str | None = None, validators_dir: Path | str = VALIDATORS_DIR
) -> list[str]:
    """The argument list with its placeholders filled in (`{artifact}` stays when no artifact is given)."""
    out = [
        arg.replace("{validators}", str(validators_dir)).replace("{python}", sys.executable or "python3")
        for arg in command
    ]
    return [arg.replace("{artifact}", artifact) for arg in out] if artifact is not None else out


def command_problems(command: Any, *, need_artifact: bool) -> list[str]:
    """What is wrong with a command as an argument list run without a shell (empty when nothing is)."""
    if not isinstance(command, list) or not command:
        return ["is not a non-empty list of arguments"]
    if not all(isinstance(arg, str) and arg for arg in command):
        return ["has an argument that is not a non-empty string"]
    problems = []
    names = [PurePosixPath(arg).name for arg in command]
    if names[0] in SHELLS or any(n in SHELLS and nxt == "-c" for n, nxt in zip(names, command[1:])):
        problems.append(
            f"runs a shell (`{' '.join(command[:3])}`): commands run without a shell, so name "
            "the program and pass its arguments as list items"
        )
    elif any(c.isspace() for c in command[0]):
        problems.append(
            f"its program `{command[0]}` contains whitespace: a shell string in one argument? "
            "Split it into list items"
        )
    for arg in command:
        if m := SHELL_SYNTAX.search(arg):
            problems.append(
                f"argument `{arg}` has shell syntax (`{m.group()}`), which would be passed literally"
            )
    unknown = sorted({p for arg in command for p in PLACEHOLDER_RE.findall(arg)} - set(PLACEHOLDERS))
    if unknown:
        braced = ", ".join(f"{{{u}}}" for u in unknown)
        problems.append(
            f"unknown placeholder{'s' * (len(unknown) > 1)} {braced} "
            f"(known: {', '.join(f'{{{p}}}' for p in PLACEHOLDERS)})"
        )
    count = sum(arg.count("{artifact}") for arg in command)
    if need_artifact and count != 1:
        problems.append(f"must contain the `{{artifact}}` placeholder exactly once (found {count})")
    return problems


def _is_python(program: str | None) -> bool:
    return program == "{python}" or bool(program and PYTHON_RE.fullmatch(PurePosixPath(program).name))


def _interpreter(scenario: Scenario) -> str:
    """The Python that runs the validator (its program when that is a Python), else `python3`: the one
    whose packages `python:<module>` toolchains are about."""
    program = _validator_program(scenario)
    return resolve_command([program])[0] if _is_python(program) else "python3"


def sandbox_env() -> dict[str, str]:
    """The environment validators run in, rebuilt from scratch by the sandbox."""
    return scrubbed_env(tempfile.gettempdir())


def _validator_program(scenario: Scenario) -> str | None:
    command = scenario.validator_command
    return command[0] if isinstance(command, list) and command and isinstance(command[0], str) else None


def _completeness(s: Scenario) -> list[Check]:
    def check(name: str, ok: bool, good: str, bad: str) -> Check:
        return Check(name, ok, good if ok else bad, "complete")

    path = PurePosixPath(s.artifact_path or "")
    checks = [
        check(
            "harness id",
            bool(s.harness_id.strip()),
            f"`{s.harness_id}`",
            "no harness id: scores cannot be tied to the harness that produced them",
        ),
        check(
            "artifact path",
            bool(s.artifact_path) and not path.is_absolute() and ".." not in path.parts,
            f"`{s.artifact_path}`",
            "no artifact path"
            if not s.artifact_path
            else f"`{s.artifact_path}` must be relative to the workspace, without `..`",
        ),
        check("score metric", bool(s.score_metric.strip()), f"`{s.score_metric}`", "no score metric"),
        check(
            "direction",
            s.direction in Direction.values,
            s.direction,
            f"`{s.direction}` is not one of {', '.join(Direction.values)}",
        ),
    ]
    if s.arena_url:
        try:
            URLValidator(schemes=["http", "https"])(s.arena_url)
            checks.append(check("arena", True, f"{s.arena_name or 'arena'} at {s.arena_url}", ""))
        except ValidationError:
            checks.append(check("arena", False, "", f"arena URL `{s.arena_url}` is not a valid http(s) URL"))
    else:
        checks.append(
            check(
                "arena",
                not s.arena_name,
                "no arena: scores stay in smrweb",
                f"arena `{s.arena_name}` has no URL",
            )
        )
    problems = command_problems(s.validator_command, need_artifact=True)
    checks.append(
        check(
            "validator command",
            not problems,
            "an argument list with one `{artifact}`",
            "validator command " + "; ".join(problems),
        )
    )
    if s.scoring_command:
        problems = command_problems(s.scoring_command, need_artifact=False)
        checks.append(
            check(
                "scoring command", not problems, "an argument list", "scoring command " + "; ".join(problems)
            )
        )
    else:
        checks.append(
            check(
                "scoring command",
                True,
                "none: scores arrive as score events (from the harness or the arena's result)",
                "",
            )
        )
    toolchains = s.required_toolchains
    if not isinstance(toolchains, list) or not all(isinstance(t, str) for t in toolchains):
        checks.append(
            check("required toolchains", False, "", "required toolchains must be a list of strings")
        )
    else:
        bad = [t for t in toolchains if not _toolchain_spec_ok(t)]
        listed = ", ".join(f"`{t}`" for t in toolchains) or "none"
        checks.append(
            check(
                "required toolchains",
                not bad,
                listed,
                f"unknown toolchain {', '.join(f'`{t}`' for t in bad)}: use a program name "
                "(`cargo`) or `python:<module>`",
            )
        )
    return checks


def _toolchain_spec_ok(spec: str) -> bool:
    if spec.startswith("python:"):
        return bool(MODULE_RE.fullmatch(spec.removeprefix("python:")))
    return bool(PROGRAM_RE.fullmatch(spec))


def _consistency(s: Scenario) -> list[Check]:
    checks = []
    lo, hi = s.score_min, s.score_max
    ordered = lo is None or hi is None or lo <= hi
    bounds = f"[{'-∞' if lo is None else f'{lo:g}'}, {'∞' if hi is None else f'{hi:g}'}]"
    checks.append(
        Check(
            "score bounds",
            ordered,
            bounds if ordered else f"score_min {lo:g} is above score_max {hi:g}",
            "consistent",
        )
    )
    name = PurePosixPath(s.artifact_path or "").name.lower()
    implied = next((k for k, exts in KIND_EXTENSIONS.items() if name.endswith(exts)), None)
    wanted = KIND_EXTENSIONS.get(s.artifact_kind)
    if not name:
        detail, ok = "nothing to compare the kind with: no artifact path", True
    elif wanted and not name.endswith(wanted):
        ends = " or ".join(wanted)
        detail, ok = f"kind {s.artifact_kind} needs a path ending in {ends}, not `{s.artifact_path}`", False
    elif implied and s.artifact_kind != implied and s.artifact_kind not in GENERIC_KINDS:
        detail, ok = f"`{s.artifact_path}` is a {implied} path, but the kind is {s.artifact_kind}", False
    else:
        detail, ok = f"{s.artifact_kind} at `{s.artifact_path}`", True
    checks.append(Check("artifact kind", ok, detail, "consistent"))
    program = _validator_program(s)
    if program and "/" not in program and "{" not in program:
        declared = isinstance(s.required_toolchains, list) and program in s.required_toolchains
        checks.append(
            Check(
                "validator toolchain",
                declared,
                f"the validator's program `{program}` is a required toolchain"
                if declared
                else f"the validator runs `{program}`, which is not among the required toolchains",
                "consistent",
            )
        )
    return checks


def _python_has(interpreter: str, module: str, env: dict[str, str]) -> bool | None:
    """Whether `interpreter` can import `module` in the validators' environment (found, not imported:
    importing could run its code); None when the interpreter does not answer."""
    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)"
    try:
        done = subprocess.run(
            [interpreter, "-c", code, module],
            check=False,
            capture_output=True,
            timeout=10,
            env=env,
            cwd=env.get("HOME"),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: True, 1: False}.get(done.returncode)  # another code: find_spec raised (a broken parent)


def _on_worker(s: Scenario) -> list[Check]:
    env = sandbox_env()
    search = env["PATH"]
    where = f"the validators' PATH on this worker ({search})"
    checks = []
    toolchains = s.required_toolchains if isinstance(s.required_toolchains, list) else []
    program = _validator_program(s)
    python = _interpreter(s)
    python_path = shutil.which(python, path=search)
    for spec in toolchains:
        if not isinstance(spec, str) or not _toolchain_spec_ok(spec):
            continue  # reported as incomplete already
        name = f"toolchain {spec}"
        if not spec.startswith("python:"):
            found = shutil.which(spec, path=search)
            needed = "needed by the validator" if spec == program else "a required toolchain of this scenario"
            checks.append(
                Check(
                    name,
                    found is not None,
                    f"`{spec}` is {found}" if found else f"`{spec}` is not on {where}; {needed}",
                    "worker",
                )
            )
            continue
        module = spec.removeprefix("python:")
        needed = "needed by the validator" if _is_python(program) else "a required toolchain of this scenario"
        if python_path is None:
            checks.append(
                Check(
                    name,
                    False,
                    f"cannot check python package `{module}`: `{python}` is not on {where}",
                    "worker",
                )
            )
            continue
        has = _python_has(python_path, module, env)
        used = f"checked with {python_path}, the validator's interpreter"
        if has is None:
            detail = f"{python_path} did not answer whether python package `{module}` is installed"
        elif has:
            detail = f"python package `{module}` is importable ({used})"
        else:
            detail = f"python package `{module}` is not installed on this worker ({needed}; {used})"
        checks.append(Check(name, bool(has), detail, "worker"))
    checks.append(_validator_present(s, search))
    return checks


def _validator_present(s: Scenario, search: str) -> Check:
    """The validator's program exists and is executable here; when it is a Python, so is its script."""
    if command_problems(s.validator_command, need_artifact=True):
        return Check("validator program", False, "no valid validator command to look for", "worker")
    argv = resolve_command(s.validator_command)
    found = shutil.which(argv[0], path=search)
    if found is None:
        missing = (
            f"`{argv[0]}` does not exist or is not executable"
            if "/" in argv[0]
            else f"`{argv[0]}` is not on the validators' PATH on this worker ({search})"
        )
        return Check("validator program", False, missing, "worker")
    script = argv[1] if _is_python(argv[0]) and len(argv) > 1 else None
    if script is None or script.startswith("-") or "{" in script:
        return Check("validator program", True, f"`{found}`", "worker")
    if not os.path.isabs(script):
        return Check(
            "validator program",
            False,
            f"validator script `{script}` is a relative path, but "
            "validators run in an empty temporary directory: use `{validators}/…` or an absolute "
            "path",
            "worker",
        )
    if not (os.path.isfile(script) and os.access(script, os.R_OK)):
        return Check(
            "validator program", False, f"validator script `{script}` does not exist on this worker", "worker"
        )
    return Check("validator program", True, f"`{found}` running `{script}`", "worker")


def preflight(scenario: Scenario) -> PreflightReport:
    """Every check of a preset, run here: call it on the worker that will run the validator."""
    return PreflightReport(
        scenario.key,
        socket.gethostname(),
        _completeness(scenario) + _consistency(scenario) + _on_worker(scenario),
    )
