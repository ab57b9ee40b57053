"""The repository at a git project's bound path is the agent's own, not a way into another one
(red-team N3): the filesystem checks, git's own confirmation, and the pin kept on the project."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from django.conf import settings

from smrweb.sources.base import NotPossible, SourceError
from smrweb.sources.git.cli import RepoMissing, run_git
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Project

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
        confirm_repository(own)
    except RepoMissing:
        return None
    except SourceError as exc:
        raise InvalidInput("git_repo_path", str(exc)) from None
    return own.pin()


def confirm_repository(own: OwnRepository) -> None:
    """git, told exactly which repository, agrees it is one and that its common dir is its git dir."""
    proc = run_git(
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
