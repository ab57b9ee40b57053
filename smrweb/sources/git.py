"""The git-workspace source: a project whose one run is a branch of a local git repository.

Read with the `git` CLI (argument lists, no shell, `git -C <repo>`, no network), written through the
tracking services like every other source:

- every commit on the branch that changes the scenario's `artifact_path` (as `git log -- <path>` lists
  them, oldest first) → an artifact version (content-addressed blob, `commit` = the commit) and a
  restorable checkpoint `git:<commit>`;
- each line of `.smrweb/scores.jsonl` at the branch head → a score (a submission) with the id
  `git:<commit>:<line hash>`, linked to the artifact bytes of the commit it names;
- a rollback → a new commit on top of the branch that restores the path's bytes from the chosen commit,
  built without a checkout (a temporary index) and published with a compare-and-swap `update-ref`:
  history is never rewritten.

The run's cursor (`Run.source_cursor`) holds the last synced commit and the scores file's blob id.
See docs/integrations.md#git-workspace-source.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import mimetypes
import os
import posixpath
import re
import shlex
import stat
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from smrweb.sources.apply import apply_events
from smrweb.sources.base import Malformed, NotPossible, SourceError, TimedOut
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents, InvalidInput
from smrweb.tracking.models import Project, Rollback, Run

SCORES_FILE = ".smrweb/scores.jsonl"
SCORE_FIELDS = frozenset({"score", "commit", "ts", "note", "details"})
GIT_TIMEOUT = 60.0
CAS_TRIES = 3  # compare-and-swap attempts when the branch moves under a rollback
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


def run_id_for(branch: str) -> str:
    """The run of a branch: `git:<branch>` with "/" written "~" (never in a ref name, so no clash)."""
    return "git:" + branch.replace("/", "~")


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


def _env(**extra: str) -> dict[str, str]:
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
# (red-team N3). `_env` starts from nothing, so the worker's own never reach git; none is ever added.
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


def _git(
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
            env=env or _env(GIT_CEILING_DIRECTORIES=ceiling),
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
        env=_env(GIT_CEILING_DIRECTORIES="/"),
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


# --- the repository is the agent's own (red-team N3) ----------------------------------------------------
# The agent chooses what lies at the bound path, so the path alone could lead git into another team's
# repository: a `.git` file (`gitdir: …`), a symlinked `.git` or repository directory, a `commondir` or an
# alternates file, a linked work tree, or smrweb's own mirror of another project. Every sync and every write
# checks the repository here first, then runs git with `--git-dir`/`--work-tree` naming what was checked
# (git discovers nothing). What it resolves to is pinned on the project (`source_settings`, under
# services.GIT_PIN) at bind time, or by the first sync that passes, and may not change afterwards.


class ForeignRepository(SourceError):
    """The bound directory does not hold a repository of its own: git would read or write another one."""

    kind = "foreign_repository"


@dataclass(frozen=True)
class OwnRepository:
    """A repository that passed `check_own_repository`: real paths with no symlink on the way."""

    path: str  # as bound (Project.git_repo_path)
    git_dir: str  # <work tree>/.git, or the bare repository itself
    work_tree: str  # "" for a bare repository

    def pin(self) -> dict[str, str]:
        return {"path": self.path, "git_dir": self.git_dir, "work_tree": self.work_tree}

    def opts(self) -> tuple[str, ...]:
        """git's command-line options naming this repository and nothing else."""
        return (f"--git-dir={self.git_dir}", *((f"--work-tree={self.work_tree}",) if self.work_tree else ()))


def _refused(path: str, why: str) -> ForeignRepository:
    return ForeignRepository(
        f"Refused {path}: {why} smrweb reads and writes only the repository that lives in the bound "
        "directory itself; nothing was imported or written."
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _looks_bare(path: str) -> bool:
    """What git itself requires of a repository directory: HEAD, objects/ and refs/."""
    return all(
        check(os.path.join(path, name))
        for check, name in ((os.path.isfile, "HEAD"), (os.path.isdir, "objects"), (os.path.isdir, "refs"))
    )


def check_own_repository(path: str, pin: dict | None = None) -> OwnRepository:
    """The repository at `path`, if it is its own: `path` and its `.git` are real directories (not links,
    not a `gitdir:` file), it is not in smrweb's data directory, its git dir has no `commondir`, no
    alternates, no linked work trees and no symlink leading out of it, and it resolves to what `pin`
    recorded (a pin made for another path does not apply). RepoMissing when there is no repository yet,
    ForeignRepository for anything that would lead git elsewhere. Filesystem checks only: no git runs."""
    if not path or not os.path.isabs(path) or "\x00" in path:
        raise NotPossible(f"The repository path {path!r} is not an absolute path.")
    where = os.path.normpath(path)
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        raise RepoMissing(f"No repository at {path}: the directory does not exist.") from None
    except OSError as exc:
        raise RepoMissing(f"No repository at {path}: {exc.strerror}.") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refused(path, f"the repository directory is a symbolic link (to {os.readlink(where)}).")
    if not stat.S_ISDIR(st.st_mode):
        raise RepoMissing(f"No repository at {path}: not a directory.")
    real = os.path.realpath(where)
    for root, what in (
        (settings.DATA_DIR, "smrweb's data directory"),
        (settings.SMRWEB_GIT_MIRROR_ROOT, "smrweb's git mirrors"),
    ):
        root = os.path.realpath(str(root))
        if _inside(real, root) or _inside(root, real):
            raise _refused(path, f"it is in (or holds) {what} {root}, which is never an agent's repository.")
    dotgit = os.path.join(real, ".git")
    try:
        mode = os.lstat(dotgit).st_mode
    except FileNotFoundError:
        mode = None
    if mode is None:
        if not _looks_bare(real):
            raise RepoMissing(
                f"{path} is not a git repository (no .git directory in it, and not a bare repository)."
            )
        git_dir, work_tree = real, ""
    elif stat.S_ISLNK(mode):
        raise _refused(path, f"its .git is a symbolic link (to {os.readlink(dotgit)}), not a directory.")
    elif stat.S_ISREG(mode):
        raise _refused(
            path,
            "its .git is a file (`gitdir: …`: a linked work tree, a submodule checkout or a redirect to "
            "another repository), not the repository's own directory.",
        )
    elif not stat.S_ISDIR(mode):
        raise _refused(path, "its .git is not a directory.")
    else:
        git_dir, work_tree = dotgit, real
    if pin and pin.get("path") == path and (pin.get("git_dir"), pin.get("work_tree")) != (git_dir, work_tree):
        raise _refused(
            path,
            f"it now resolves to {git_dir}, but {pin.get('git_dir')} was pinned when it was bound (a "
            "directory on the way was moved or replaced by a link). If the operator moved the repository, "
            "set the project's repository path to its new location: that is pinned anew.",
        )
    for name, why in (
        ("commondir", "its git dir has a `commondir` file, which makes git use another repository's refs."),
        ("objects/info/alternates", "its git dir borrows objects from elsewhere (objects/info/alternates)."),
        (
            "objects/info/http-alternates",
            "its git dir borrows objects from elsewhere (objects/info/http-alternates).",
        ),
        (".git", "its git dir holds a .git of its own, which git would follow instead."),
    ):
        if os.path.lexists(os.path.join(git_dir, name)):
            raise _refused(path, why)
    linked = os.path.join(git_dir, "worktrees")
    if os.path.lexists(linked) and (
        os.path.islink(linked) or not os.path.isdir(linked) or os.listdir(linked)
    ):
        raise _refused(
            path,
            "the repository has linked work trees (.git/worktrees/…), whose files say where they are: "
            "remove them (`git worktree remove`) or bind a repository without them.",
        )
    _no_link_leads_out(path, git_dir)
    return OwnRepository(path, git_dir, work_tree)


def _no_link_leads_out(path: str, git_dir: str) -> None:
    """No symlink anywhere in the git dir leads outside it (refs/, objects/ or HEAD pointing at another
    repository's would make its refs and objects ours)."""
    todo = [git_dir]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    target = os.path.realpath(entry.path)
                    if not _inside(target, git_dir):
                        raise _refused(path, f"{entry.path} is a symbolic link leading out (to {target}).")
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)


def pinned(project: Project) -> dict | None:
    """The project's pin, when it was made for the path the project is bound to now."""
    pin = (project.source_settings or {}).get(services.GIT_PIN)
    return pin if isinstance(pin, dict) and pin.get("path") == project.git_repo_path else None


def pin_for_binding(path: str) -> dict | None:
    """At bind time: the pin of the repository at `path`, or None when there is none yet (the first sync
    that passes pins it). A repository that would lead git elsewhere is refused (InvalidInput)."""
    try:
        own = check_own_repository(path)
        _confirm(own)
    except RepoMissing:
        return None
    except SourceError as exc:
        raise InvalidInput("git_repo_path", str(exc)) from None
    return own.pin()


def _confirm(own: OwnRepository) -> None:
    """git, told exactly which repository, agrees it is one and that its common dir is its git dir."""
    proc = _git(
        own.work_tree or own.git_dir,
        "rev-parse",
        "--absolute-git-dir",
        "--path-format=absolute",
        "--git-common-dir",
        ok=(0, 128),
        repo_opts=own.opts(),
    )
    if proc.returncode != 0:
        raise RepoMissing(
            f"{own.path} is not a git repository ({proc.stderr.decode('utf-8', 'replace').strip()[:300]})."
        )
    said = proc.stdout.decode("utf-8", "surrogateescape").splitlines()[:2]
    if [os.path.realpath(p) for p in said] != [own.git_dir, own.git_dir]:
        raise _refused(own.path, f"git resolves it to {' and '.join(said)}, not {own.git_dir}.")


class Repo:
    """One branch of one local repository. Reads go to a bare mirror smrweb owns (fetched from the agent's
    repository, with smrweb's configuration); only a rollback writes to the agent's repository, with
    plumbing that runs no hooks, filters or helpers (SAFE_CONFIG)."""

    def __init__(self, path: str, branch: str, *, pin: dict | None = None):
        self.own = check_own_repository(path, pin)
        self.path, self.branch = path, check_branch(branch)
        self.ref = f"refs/heads/{branch}"
        self.mirror = mirror_path(self.own.work_tree or self.own.git_dir)
        _confirm(self.own)
        self.gitdir = self.common_dir = self.own.git_dir  # no commondir, no linked work trees (checked)

    @classmethod
    def for_project(cls, project: Project, branch: str = "") -> Repo:
        """The project's repository, checked against its pin; an unpinned binding (made before pins, or
        before the repository existed) is pinned now, from this check that passed."""
        if not project.git_repo_path or not project.git_branch:
            raise NotPossible(f"Project {project.slug} has no repository path or branch set.")
        pin = pinned(project)
        repo = cls(project.git_repo_path, branch or project.git_branch, pin=pin)
        if pin is None:
            services.pin_git_repository(project, repo.own.pin())
        return repo

    def verify(self) -> None:
        """The repository is still the one checked (and pinned): before every write, and every fetch."""
        check_own_repository(self.path, self.own.pin())

    def git(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        """git in the mirror (reads)."""
        return _git(self.mirror, *args, **kwargs)

    def agent(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        """git in the agent's repository (its refs, and a rollback's writes), named explicitly."""
        return _git(self.own.work_tree or self.own.git_dir, *args, repo_opts=self.own.opts(), **kwargs)

    def refresh(self) -> str:
        """Fetch the branch into the mirror (created on first use); the branch's head commit."""
        self.verify()
        if not os.path.isdir(self.mirror):
            root = os.path.dirname(self.mirror)
            os.makedirs(root, mode=0o700, exist_ok=True)
            _git(root, "init", "--bare", "-q", os.path.basename(self.mirror))
        proc = self.git(
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--force",
            f"--upload-pack={self._upload_pack()}",
            "--end-of-options",
            self.own.git_dir,  # the checked git dir itself (upload-pack --strict looks nowhere else)
            f"+{self.ref}:{self.ref}",
            ok=(0, 1, 128),
        )
        if proc.returncode != 0:
            self.agent_head()  # says "no branch" when that is why
            raise GitFailed(
                f"could not read {self.branch} of {self.path}: "
                f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}"
            )
        return self.head()

    def _upload_pack(self) -> str:
        """The upload-pack the fetch starts in the agent's repository. git starts it with a clean slate
        (GIT_CONFIG_PARAMETERS unset), so our -c overrides and environment do not reach it on their own:
        they are given here, in the shell command git runs for a local repository."""
        overrides = [
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "protocol.allow=never",
            "protocol.file.allow=always",
            f"safe.directory={self.own.git_dir}",
            f"safe.directory={self.own.work_tree or self.own.git_dir}",
        ]
        return " ".join(
            [
                "GIT_ALLOW_PROTOCOL=",
                "GIT_NO_LAZY_FETCH=1",
                "GIT_NO_REPLACE_OBJECTS=1",
                "GIT_CONFIG_NOSYSTEM=1",
                "GIT_CONFIG_GLOBAL=/dev/null",
                "git",
                *(f"-c {shlex.quote(item)}" for item in overrides),
                "upload-pack",
                "--strict",  # the path is the git dir: no `<path>/.git` or `gitdir:` file is followed
            ]
        )

    def _head_of(self, run) -> str:
        proc = run(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{self.ref}^{{commit}}", ok=(0, 1, 128)
        )
        sha = proc.stdout.decode().strip()
        if proc.returncode != 0 or not OID_RE.match(sha):
            raise RepoMissing(f"No branch {self.branch!r} in {self.path}.")
        return sha

    def head(self) -> str:
        """The branch's head as last fetched into the mirror."""
        return self._head_of(self.git)

    def agent_head(self) -> str:
        """The branch's head in the agent's repository, now."""
        return self._head_of(self.agent)

    def resolve(self, name: str) -> str | None:
        """The full hash of a commit named by a (possibly abbreviated) hash, or None."""
        if not HEX_RE.match(name):
            return None
        proc = self.git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}", ok=(0, 1, 128)
        )
        sha = proc.stdout.decode().strip()
        return sha if proc.returncode == 0 and OID_RE.match(sha) else None

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.git("merge-base", "--is-ancestor", older, newer, ok=(0, 1, 128)).returncode == 0

    def commits_touching(self, head: str, since: str | None, path: str) -> list[Commit]:
        """Commits of `head` (after `since`) that change `path`, parents before children."""
        revs = [head] if since is None else [head, f"^{since}"]
        out = self.git(
            "log",
            "-z",
            "--no-show-signature",
            "--topo-order",
            "--reverse",
            "--format=%H%x1f%ct%x1f%s",
            "--end-of-options",
            *revs,
            "--",
            path,
        ).stdout
        commits = []
        for record in out.split(b"\x00"):
            if not record.strip():
                continue
            sha, stamp, subject = record.decode("utf-8", "replace").strip("\n").split("\x1f", 2)
            commits.append(Commit(sha, datetime.fromtimestamp(int(stamp), UTC), subject))
        return commits

    def commit_time(self, sha: str) -> datetime:
        return datetime.fromtimestamp(
            int(self.git("show", "-s", "--no-show-signature", "--format=%ct", sha, "--").stdout.strip()), UTC
        )

    def entry(self, commit: str, path: str) -> Entry | None:
        """The tree entry of `path` at `commit` (None when the path does not exist there)."""
        out = self.git("ls-tree", "-z", "-l", "--full-tree", commit, "--", path).stdout
        for record in out.split(b"\x00"):
            meta, _, name = record.partition(b"\t")
            if name.decode("utf-8", "surrogateescape") == path:
                mode, kind, oid, size = meta.decode().split()
                return Entry(mode, kind, oid, None if size == "-" else int(size))
        return None

    def read_blob(self, entry: Entry, *, what: str) -> bytes:
        if entry.type != "blob":
            raise Malformed(f"{what} is a {entry.type}, not a file.")
        if entry.size is not None and entry.size > settings.SMRWEB_MAX_ARTIFACT_BYTES:
            raise Malformed(
                f"{what} is {entry.size} bytes; artifacts are limited to "
                f"{settings.SMRWEB_MAX_ARTIFACT_BYTES}."
            )
        return self.git("cat-file", "blob", entry.oid).stdout

    # --- writing: a new commit on top of the branch, never a rewrite ------------------------------

    def commit_with(
        self, parent: str, path: str, entry: Entry, *, message: str, author: tuple[str, str]
    ) -> str:
        """A commit whose tree is `parent`'s with `path` set to `entry`, built in a temporary index
        (the repository's own index and work tree are not touched). Not published yet."""
        self.verify()
        with tempfile.TemporaryDirectory(prefix="smrweb-git-") as tmp:
            index_env = _env(GIT_INDEX_FILE=os.path.join(tmp, "index"))
            self.agent("read-tree", parent, env=index_env)
            self.agent(
                "update-index", "--add", "--cacheinfo", f"{entry.mode},{entry.oid},{path}", env=index_env
            )
            tree = self.agent("write-tree", env=index_env).stdout.decode().strip()
        commit_env = _env(
            GIT_AUTHOR_NAME=author[0],
            GIT_AUTHOR_EMAIL=author[1],
            GIT_COMMITTER_NAME=COMMITTER[0],
            GIT_COMMITTER_EMAIL=COMMITTER[1],
        )
        return (
            self.agent(
                "commit-tree",
                "--no-gpg-sign",
                tree,
                "-p",
                parent,
                "-F",
                "-",
                input=message.encode(),
                env=commit_env,
            )
            .stdout.decode()
            .strip()
        )

    def publish(self, new: str, old: str, *, reason: str) -> bool:
        """Move the branch from `old` to `new` only if it is still at `old` (compare-and-swap)."""
        self.verify()
        proc = self.agent("update-ref", "-m", reason, self.ref, new, old, ok=(0, 1, 128))
        if proc.returncode == 0:
            return True
        if self.agent_head() != old:
            return False  # it moved: the caller rebuilds on the new head
        raise GitFailed(
            f"git update-ref failed in {self.path}: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}"
        )

    def find_trailer(self, head: str, trailer: str, *, depth: int = 500) -> str | None:
        """A recent commit of the branch whose message carries `trailer` (a rollback already applied)."""
        # A whole line (so #12 does not match #123); slugs and ids hold no regex syntax.
        out = (
            self.git(
                "log",
                "-n",
                str(depth),
                "--no-show-signature",
                "--format=%H",
                "--extended-regexp",
                f"--grep=^{trailer}$",
                "--end-of-options",
                head,
                "--",
            )
            .stdout.decode()
            .split()
        )
        return out[0] if out else None

    def worktrees_on_branch(self) -> list[str]:
        """The work tree, when it has the branch checked out (its HEAD moves with it). Only the repository's
        own: linked work trees are refused (check_own_repository), and their list is the agent's to write."""
        if not self.own.work_tree:
            return []
        proc = self.agent("symbolic-ref", "--quiet", "HEAD", ok=(0, 1, 128))
        return [self.own.work_tree] if proc.stdout.decode("utf-8", "replace").strip() == self.ref else []


def _blob_id(data: bytes, like: str) -> str:
    """The id git gives these bytes as a blob, in the hash of `like` (sha1 or sha256 repositories)."""
    digest = hashlib.sha1 if len(like) == 40 else hashlib.sha256
    return digest(b"blob %d\x00" % len(data) + data).hexdigest()


class _Unsafe(Exception):
    """A part of the way to the path is a symlink, not a directory, or not a regular file."""


def _open_dir(worktree: str, parts: list[str], *, create: bool = False) -> int:
    """A descriptor of the directory `parts` below `worktree` (a real path), each step from / opened with
    O_NOFOLLOW relative to the last (so a symlink swapped in after a check, on the way to the work tree or
    inside it, is never followed); created below the work tree when `create`."""
    above = [part for part in worktree.split("/") if part]
    # O_PATH: a step needs only search permission (a 0711 home on the way to the work tree is fine).
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open("/", flags)
    try:
        for number, part in enumerate([*above, *parts]):
            try:
                step = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create or number < len(above):
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                step = os.open(part, flags, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:  # ELOOP: a symlink; ENOTDIR: a file
                raise _Unsafe(part) from exc
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read_worktree_file(worktree: str, path: str) -> bytes | None:
    """The file's bytes (None when it does not exist); _Unsafe when it is not a plain file reached
    through plain directories."""
    *dirs, name = path.split("/")
    try:
        dir_fd = _open_dir(worktree, dirs)
    except FileNotFoundError:
        return None
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Unsafe(name) from exc
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise _Unsafe(name)
            return fh.read()
    finally:
        os.close(dir_fd)


def _path_is_clean(repo: Repo, worktree: str, entry: Entry | None, path: str) -> bool:
    """No staged or unstaged change to `path` in the work tree against `entry` (the path at the branch
    head). Compared by blob ids computed here from the raw bytes and read from the index: `git diff`
    would run the agent's clean filters and fsmonitor. A symlink anywhere on the way is a change."""
    if os.path.realpath(worktree) != repo.own.work_tree:
        return False  # only ever the repository's own work tree
    try:
        data = _read_worktree_file(repo.own.work_tree, path)
    except (_Unsafe, FileNotFoundError):
        return False
    staged = _index_oid(repo, path)
    if entry is None:
        return staged is None and data is None
    return staged == entry.oid and data is not None and _blob_id(data, entry.oid) == entry.oid


def _index_oid(repo: Repo, path: str) -> str | None:
    """The blob id the work tree's index holds for `path` (stage 0), or None."""
    out = repo.agent("ls-files", "-s", "-z", "--", path).stdout
    for record in out.split(b"\x00"):
        meta, _, name = record.partition(b"\t")
        if name.decode("utf-8", "surrogateescape") == path and meta.split()[2:3] == [b"0"]:
            return meta.split()[1].decode()
    return None


DRIVER_KEYS = {
    "filter": ("clean", "smudge", "process"),
    "diff": ("textconv", "command"),
    "merge": ("driver",),
}


def _drivers_disabled(repo: Repo) -> tuple[str, ...]:
    """Overrides that empty every filter, diff and merge driver the repository's configuration defines.
    Attributes (which the agent writes) pick drivers by name, and writing an index re-reads racily clean
    files through their clean filter: with the drivers emptied on the command line, none can run."""
    out = repo.agent(
        "config", "-z", "--name-only", "--get-regexp", r"^(filter|diff|merge)\.", ok=(0, 1)
    ).stdout
    found = set()
    for name in out.decode("utf-8", "surrogateescape").split("\x00"):
        section, _, rest = name.partition(".")
        driver, _, _ = rest.rpartition(".")
        if section in DRIVER_KEYS and driver:
            found.add((section, driver))
    overrides = [
        f"{section}.{driver}.{key}=" for section, driver in sorted(found) for key in DRIVER_KEYS[section]
    ]
    return (
        *overrides,
        *(f"filter.{driver}.required=false" for section, driver in sorted(found) if section == "filter"),
    )


def _write_to_worktree(repo: Repo, worktree: str, entry: Entry, path: str) -> bool:
    """Put the committed bytes of `path` in the work tree and its index (what `git checkout <new> -- path`
    did, without the agent's smudge filters, hooks or fsmonitor). Written beside it under a new name and
    moved into place within directories opened without following symlinks, so neither a symlink nor a
    hard link planted at the path or on the way (even after the check) makes smrweb write elsewhere.
    Only ever the repository's own work tree, checked again right before the write."""
    if not repo.own.work_tree or os.path.realpath(worktree) != repo.own.work_tree:
        return False
    try:
        repo.verify()
    except SourceError:
        return False  # the commit is published; the work tree is not written (the note says how)
    data = repo.agent("cat-file", "blob", entry.oid).stdout  # raw bytes: cat-file applies no filters
    *dirs, name = path.split("/")
    try:
        dir_fd = _open_dir(repo.own.work_tree, dirs, create=True)
    except (_Unsafe, FileNotFoundError):
        return False
    try:
        spare = f".{name}.smrweb-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), 0o755 if entry.mode == "100755" else 0o644)
            os.replace(
                spare, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd
            )  # a link at `name` is replaced, not followed
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spare, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    repo.agent(
        "update-index",
        "--add",
        "--cacheinfo",
        f"{entry.mode},{entry.oid},{path}",
        config=_drivers_disabled(repo),
    )
    return True


# --- sync ------------------------------------------------------------------------------------------


def _apply(project: Project, rid: str, events: list[dict]) -> int:
    try:
        return apply_events(project, rid, [(None, event) for event in events]).accepted
    except InvalidEvents as exc:
        raise Malformed(
            f"{SCORES_FILE} or the commits hold data outside the contract: "
            f"{[(e.index, e.field, e.message) for e in exc.errors[:3]]}"
        ) from exc


def sync_branch(project: Project, *, report) -> None:
    """New commits that touch the artifact path (each stored and its cursor saved at once), then the
    scores file at the head when its blob changed. Safe to repeat: versions are keyed by (bytes, commit),
    checkpoints and scores by ids derived from commits."""
    repo = Repo.for_project(project)
    scenario = project.scenario
    path = check_artifact_path(scenario.artifact_path)
    rid = run_id_for(repo.branch)
    run = Run.objects.filter(project=project, external_id=rid).first()
    cursor = dict(run.source_cursor) if run else {}
    head = repo.refresh()
    report.listed = 1
    since = cursor.get("commit")
    if since and (not OID_RE.match(str(since)) or not repo.is_ancestor(since, head)):
        since = None  # the branch was rewritten (or the cursor is foreign): rescan; ids make repeats no-ops
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    for commit in repo.commits_touching(head, since, path):
        entry = repo.entry(commit.sha, path)
        label = f"{commit.sha[:10]} {commit.subject}"[:500]
        checkpoint: dict[str, Any] = {
            "id": f"git:{commit.sha}",
            "type": "checkpoint",
            "ts": commit.ts,
            "label": label,
            "commit": commit.sha,
        }
        if entry is None:  # the commit deleted the path: lineage, but nothing to store or restore
            checkpoint.update(restorable=False, failure_reason=f"{path} does not exist at this commit.")
        else:
            content = repo.read_blob(entry, what=f"{path} at {commit.sha[:10]}")
            _, created = services.store_artifact(
                project,
                rid,
                path=path,
                content=io.BytesIO(content),
                kind=scenario.artifact_kind,
                content_type=content_type,
                commit=commit.sha,
            )
            report.artifacts_pulled += created
        report.events_accepted += _apply(project, rid, [checkpoint])
        cursor["commit"] = commit.sha
        services.record_poll(project, rid, source_cursor=dict(cursor))
    cursor["commit"] = head
    scores = repo.entry(head, SCORES_FILE)
    if scores is not None and scores.oid != cursor.get("scores"):
        events = score_events(
            repo,
            repo.read_blob(scores, what=SCORES_FILE),
            path=path,
            harness_id=scenario.harness_id or "git",
            skip=_inherited_lines(repo, cursor.get("base")),
        )
        report.events_accepted += _apply(project, rid, events)
        cursor["scores"] = scores.oid
    services.record_poll(
        project, rid, source_cursor=dict(cursor), git_branch=repo.branch[:200], git_commit=head
    )
    report.synced = 1


def _inherited_lines(repo: Repo, base: Any) -> frozenset[bytes]:
    """The scores file's lines at the commit a launched branch started from: the run it came from
    scored those, so the new run does not count them again."""
    if not isinstance(base, str) or not OID_RE.match(base):
        return frozenset()
    entry = repo.entry(base, SCORES_FILE)
    if entry is None or entry.type != "blob":
        return frozenset()
    data = repo.read_blob(entry, what=f"{SCORES_FILE} at {base[:10]}")
    return frozenset(line.strip() for line in data.split(b"\n") if line.strip())


def score_events(
    repo: Repo, data: bytes, *, path: str, harness_id: str, skip: frozenset[bytes] = frozenset()
) -> list[dict]:
    """The score events of a scores file: one JSON object a line, `score` and `commit` required
    (lines in `skip` are left out: a launched branch's inherited scores)."""
    events: list[dict] = []
    commits: dict[str, str | None] = {}
    digests: dict[str, str | None] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line in skip:
            continue
        where = f"{SCORES_FILE} line {number}"
        try:
            item = json.loads(line)
        except ValueError:
            raise Malformed(f"{where}: not JSON.") from None
        if not isinstance(item, dict):
            raise Malformed(f'{where}: expected an object like {{"score": 0.8, "commit": "<sha>"}}.')
        if unknown := set(item) - SCORE_FIELDS:
            raise Malformed(
                f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(SCORE_FIELDS))}."
            )
        score = item.get("score")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise Malformed(f"{where}: `score` must be a finite number.")
        name = item.get("commit")
        if not isinstance(name, str) or not HEX_RE.match(name):
            raise Malformed(f"{where}: `commit` must be a commit hash (4 to 64 hexadecimal characters).")
        if name not in commits:
            commits[name] = repo.resolve(name)
        sha = commits[name]
        if sha is None:
            raise Malformed(
                f"{where}: no commit {name} in the repository (or the abbreviation is ambiguous)."
            )
        ts, note, details = item.get("ts"), item.get("note"), item.get("details", {})
        if ts is not None and not isinstance(ts, str):
            raise Malformed(f"{where}: `ts` must be an RFC 3339 timestamp string.")
        if note is not None and not isinstance(note, str):
            raise Malformed(f"{where}: `note` must be a string.")
        if not isinstance(details, dict):
            raise Malformed(f"{where}: `details` must be an object.")
        if sha not in digests:  # the bytes of the artifact path at that commit: what the score is of
            entry = repo.entry(sha, path)
            digests[sha] = (
                hashlib.sha256(repo.read_blob(entry, what=f"{path} at {sha[:10]}")).hexdigest()
                if entry is not None and entry.type == "blob"
                else None
            )
        events.append(
            {
                "id": f"git:{sha}:{hashlib.sha256(line).hexdigest()[:16]}",
                "type": "score",
                "score": score,
                "ts": ts if ts is not None else repo.commit_time(sha),
                "commit": sha,
                "harness_id": harness_id[:200],
                "artifact": digests[sha],
                "details": {**details, **({"note": note} if note else {})},
            }
        )
    return events


# --- rollback ----------------------------------------------------------------------------------------


def target_commit(repo: Repo, rollback: Rollback) -> str:
    """The commit whose bytes a rollback restores: the checkpoint's commit, or the submission's."""
    if rollback.target_checkpoint_id:
        name = rollback.target_checkpoint.commit
    else:
        sub = rollback.target_submission
        name = sub.commit or (sub.artifact.commit if sub.artifact_id else "")
    sha = repo.resolve(name) if name else None
    if sha is None:
        raise NotPossible(
            f"The rollback target names no commit of {repo.path}" + (f" ({name})." if name else ".")
        )
    return sha


def roll_back(rollback: Rollback) -> str:
    """Commit the target commit's bytes of the artifact path on top of the branch; return what was done.

    Refused (nothing changed) when a work tree that has the branch checked out holds uncommitted changes
    to the path. A redelivered rollback finds its own commit (the `Smrweb-Rollback` trailer) and stops.
    """
    project = rollback.run.project
    if not project.git_repo_path or not project.git_branch:
        raise NotPossible(f"Project {project.slug} has no repository path or branch set.")
    # The run's own branch: a project that started a next run follows the new branch since.
    repo = Repo.for_project(project, rollback.run.git_branch)
    path = check_artifact_path(project.scenario.artifact_path)
    target = target_commit(repo, rollback)
    wanted = repo.entry(target, path)
    if wanted is None or wanted.type != "blob":
        raise NotPossible(f"{path} is not a file at {target[:10]}: nothing to restore.")
    marker = f"Smrweb-Rollback: {project.slug}#{rollback.pk}"
    who = rollback.requested_by.get_username()
    message = (
        f"smrweb rollback: restore {path} from {target[:10]}\n\n{rollback.reason.strip()}\n\n"
        f"{marker}\nRestored-From: {target}\nRequested-By: {who}\n"
    )
    author = (f"{who} via smrweb", rollback.requested_by.email or COMMITTER[1])
    for _ in range(CAS_TRIES):
        old = repo.refresh()
        if done := repo.find_trailer(old, marker):
            return f"already applied as {done} on {repo.branch}"
        current = repo.entry(old, path)
        if current is not None and (current.mode, current.oid) == (wanted.mode, wanted.oid):
            return (
                f"{path} on {repo.branch} ({old[:10]}) already has the bytes of {target[:10]}: "
                "no commit was needed"
            )
        worktrees = repo.worktrees_on_branch()
        for worktree in worktrees:
            if not _path_is_clean(repo, worktree, current, path):
                raise NotPossible(
                    f"{path} has uncommitted changes in the work tree {worktree}, which has "
                    f"{repo.branch} checked out: commit or discard them, then roll back again. "
                    "Nothing was changed."
                )
        new = repo.commit_with(old, path, wanted, message=message, author=author)
        if repo.publish(new, old, reason=f"smrweb rollback {project.slug}#{rollback.pk}"):
            break
    else:
        raise BranchMoved(
            f"{repo.branch} moved {CAS_TRIES} times while the rollback commit was being published; "
            "nothing was changed. Roll back again once the branch is quiet."
        )
    notes = [f"committed {new[:12]} on {repo.branch} (parent {old[:12]}) restoring {path} from {target[:12]}"]
    for worktree in worktrees:
        # The branch moved under this work tree: its index and file still hold the old bytes, which
        # `git status` would show as a staged change undoing the rollback. The path was clean, so bring
        # that one path up to the new commit (nothing uncommitted is lost); anything else stays as it was.
        if _path_is_clean(repo, worktree, current, path):
            notes.append(
                f"updated {path} in the work tree {worktree}"
                if _write_to_worktree(repo, worktree, wanted, path)
                else f"could not update {path} in {worktree} (run `git checkout HEAD -- {path}` there)"
            )
        else:
            notes.append(f"{path} changed in {worktree} meanwhile: left as it is")
    return "; ".join(notes)


# --- starting the next run: a new branch -------------------------------------------------------------

NEXT_SUFFIX_RE = re.compile(r"-next-\d+\Z")


def launch_branch(launch) -> str:
    """The branch a launch creates: the branch of the run it comes from (else the project's), its own
    `-next-<n>` suffix dropped, then `-next-<launch id>` — the same name on every attempt."""
    project = launch.project
    base = (launch.from_run.git_branch if launch.from_run_id else "") or project.git_branch
    return check_branch(f"{NEXT_SUFFIX_RE.sub('', base)[:170]}-next-{launch.pk}")


def start_branch(launch) -> tuple[str, str, str]:
    """Create the launch's branch at its commit (else at the head of the branch the project follows) in
    the project's repository; (branch, commit, what was done). Creating it again at the same commit is
    a no-op (a retried attempt); a branch of that name at another commit is refused. smrweb writes only
    a ref there (`update-ref`: no hooks, no checkout), and only when the worker may write to the
    repository; otherwise it refuses and says how to create the branch by hand."""
    project = launch.project
    if not project.git_repo_path or not project.git_branch:
        raise NotPossible(f"Project {project.slug} has no repository path or branch set.")
    repo = Repo.for_project(project)
    branch = launch_branch(launch)
    if launch.git_commit:
        proc = repo.agent(
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{launch.git_commit}^{{commit}}",
            ok=(0, 1, 128),
        )
        commit = proc.stdout.decode().strip()
        if proc.returncode != 0 or not OID_RE.match(commit):
            raise NotPossible(
                f"No commit {launch.git_commit} in {project.git_repo_path} (or it is ambiguous)."
            )
    else:
        commit = repo.agent_head()
    refs = os.path.join(repo.common_dir, "refs", "heads")
    if not os.access(repo.common_dir, os.W_OK) or (os.path.isdir(refs) and not os.access(refs, os.W_OK)):
        raise NotPossible(
            f"smrweb's worker cannot write to {project.git_repo_path}, so it cannot create the branch: "
            f"create it there yourself (git branch {branch} {commit[:12]}) or give the worker write "
            "access to the repository."
        )
    ref = f"refs/heads/{branch}"
    repo.verify()
    proc = repo.agent(
        "update-ref", "-m", f"smrweb launch {project.slug}#{launch.pk}", ref, commit, "", ok=(0, 1, 128)
    )
    if proc.returncode == 0:
        return branch, commit, f"created branch {branch} at {commit[:12]} in {project.git_repo_path}"
    now = (
        repo.agent("rev-parse", "--verify", "--quiet", "--end-of-options", ref, ok=(0, 1, 128))
        .stdout.decode()
        .strip()
    )
    if now == commit:
        return (
            branch,
            commit,
            f"branch {branch} already exists at {commit[:12]} (created by an earlier attempt)",
        )
    if now:
        raise NotPossible(
            f"A branch {branch} already exists in {project.git_repo_path} at {now[:12]}; nothing was changed."
        )
    said = proc.stderr.decode("utf-8", "replace").strip()[:300]
    raise GitFailed(f"git update-ref failed in {project.git_repo_path}: {said}")
