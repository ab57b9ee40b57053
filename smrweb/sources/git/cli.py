"""The hardened `git` CLI every other module runs git through: no shell, a private environment and home,
SAFE_CONFIG on the command line, timeouts; the branch and artifact-path checks; the source's errors."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from smrweb.sources.base import NotPossible, SourceError, TimedOut
from smrweb.tracking import services

GIT_TIMEOUT = 60.0


HEX_RE = re.compile(r"^[0-9a-fA-F]{4,64}\Z")
OID_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")  # sha1 or sha256 repositories
COMMITTER = ("smrweb", "smrweb@localhost")


class GitFailed(SourceError):
    """git refused or failed (its own message is kept)."""

    kind = "git"


class RepoMissing(SourceError):
    """No repository at the path, or no such branch in it."""

    kind = "not_found"


class BranchMoved(SourceError):
    """The branch kept moving while a rollback commit was being published."""

    kind = "conflict"


# Command-line configuration beats every configuration file, the repository's included (and what those
# files include): the agent owns the repository's .git/config, so nothing that names a program or turns one
# on is left to it (red-team finding 3: gpg.program with log.showSignature ran in the worker on a sync).
# git passes these to the git processes it starts, but not to the upload-pack a fetch from a local
# repository starts (it unsets GIT_CONFIG_PARAMETERS): that one gets its overrides in --upload-pack.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "core.editor=false",
    "core.sshCommand=false",
    "core.askPass=false",
    "core.gitProxy=",
    "core.attributesFile=/dev/null",
    "core.alternateRefsCommand=",
    "core.splitIndex=false",
    "log.showSignature=false",
    "gpg.program=false",
    "gpg.openpgp.program=false",
    "gpg.x509.program=false",
    "gpg.ssh.program=false",
    "gpg.ssh.defaultKeyCommand=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "diff.external=",
    "diff.noprefix=false",
    "credential.helper=",
    "sequence.editor=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "uploadpack.packObjectsHook=",
    "uploadpack.allowFilter=false",
    "transfer.fsckObjects=false",
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
    "maintenance.auto=false",
    "gc.auto=0",
)


def _private_home() -> str:
    """An empty home of smrweb's own for git (no ~/.gitconfig of the worker's user is read): one fixed
    directory under the data dir, so no process leaves a temporary one behind (the review found six
    `smrweb-git-home-*` directories, one per worker process that ever ran git)."""
    home = os.path.join(str(settings.DATA_DIR), "git-home")
    try:
        os.mkdir(home, 0o700)
    except FileExistsError:
        pass
    if os.path.islink(home) or not os.path.isdir(home):
        raise GitFailed(f"{home} (git's private home) is not a plain directory.")
    return home


def git_env(**extra: str) -> dict[str, str]:
    """The environment git runs with, built from nothing: never the worker's (its SECRET_KEY, DATABASE_URL,
    SMR key, AWS_* must not reach anything git might start), no system or global config, no prompts, no
    optional index locks while reading, no lazy fetches, literal pathspecs, replace refs ignored."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": _private_home(),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "file",
    }
    env.update(extra)
    for name in REDIRECTING_ENV:  # never from a caller either: the repository is named on the command line
        env.pop(name, None)
    return env


# Variables that make git read or write another repository than the one named on its command line
# (red-team N3). `git_env` starts from nothing, so the worker's own never reach git; none is ever added.
REDIRECTING_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)


def run_git(
    cwd: str,
    *args: str,
    input: bytes | None = None,
    ok: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
    also_safe: str = "",
    config: tuple[str, ...] = (),
    repo_opts: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """Run `git -c <SAFE_CONFIG>… -C cwd [repo_opts] args…` (never through a shell, in the scrubbed
    environment); a return code outside `ok` is a GitFailed. `repo_opts` names the repository explicitly
    (`--git-dir`/`--work-tree`, see OwnRepository): then git discovers nothing."""
    # Repository discovery stops at the path itself: a plain directory inside some other repository
    # is "not a repository", never that other repository.
    real = os.path.realpath(cwd)
    ceiling = os.path.dirname(real) or "/"
    safe = [
        f"safe.directory={path}" for path in (real, also_safe) if path
    ]  # repositories we were told to read
    overrides = [arg for item in (*SAFE_CONFIG, *safe, *config) for arg in ("-c", item)]
    try:
        proc = subprocess.run(
            ["git", *overrides, "-C", cwd, *repo_opts, *args],
            input=input,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
            env=env or git_env(GIT_CEILING_DIRECTORIES=ceiling),
            stdin=None if input else subprocess.DEVNULL,
            cwd=_private_home(),
        )
    except subprocess.TimeoutExpired as exc:
        raise TimedOut(f"git {args[0]} took more than {GIT_TIMEOUT:g} s in {cwd}") from exc
    except OSError as exc:
        raise GitFailed(f"could not run git: {exc}") from exc
    if proc.returncode not in ok:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitFailed(
            f"git {args[0]} failed in {cwd}: {message[-1] if message else f'exit {proc.returncode}'}"
        )
    return proc


def check_branch(branch: str) -> str:
    """Refuse a branch name git would refuse (`git check-ref-format --branch`) or that does not fit a run
    id."""
    if not services.GIT_BRANCH_RE.match(branch or ""):
        raise NotPossible(
            f"{branch!r} is not a branch name smrweb follows: letters, digits and . _ / + = @ -, "
            "starting with a letter, digit or underscore."
        )
    proc = subprocess.run(
        ["git", "check-ref-format", "--branch", branch],
        capture_output=True,
        timeout=GIT_TIMEOUT,
        check=False,
        env=git_env(GIT_CEILING_DIRECTORIES="/"),
        cwd="/",
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or proc.stdout.decode().strip() != branch:
        raise NotPossible(f"{branch!r} is not a valid git branch name.")
    return branch


def check_artifact_path(path: str) -> str:
    """The scenario's artifact path as a path inside the repository: relative, normalised, no `..`."""
    if (
        not path
        or "\x00" in path
        or path.startswith("/")
        or "\\" in path
        or posixpath.normpath(path) != path
        or path.split("/")[0] in ("..", ".")
        or "/../" in f"/{path}/"
    ):
        raise NotPossible(
            f"The scenario's artifact path {path!r} is not a plain relative path inside the repository; "
            "set it to e.g. submission/optimizer.py."
        )
    return path


@dataclass(frozen=True)
class Entry:
    """One path of a commit's tree (`git ls-tree -l`)."""

    mode: str
    type: str
    oid: str
    size: int | None


@dataclass(frozen=True)
class Commit:
    sha: str
    ts: datetime
    subject: str


def mirror_path(repo_path: str) -> str:
    """The bare repository smrweb keeps for an agent's repository (one per repository path)."""
    key = hashlib.sha256(os.path.realpath(repo_path).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(str(settings.SMRWEB_GIT_MIRROR_ROOT), f"{key}.git")
