"""`Repo`: one branch of one local repository, read through the bare mirror smrweb keeps for it, and the
plumbing (no hooks, filters or helpers) that commits and publishes on the agent's repository."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from smrweb.sources.base import Malformed, NotPossible
from smrweb.sources.git.cli import (
    COMMITTER,
    HEX_RE,
    OID_RE,
    Commit,
    Entry,
    GitFailed,
    RepoMissing,
    check_branch,
    git_env,
    mirror_path,
    run_git,
)
from smrweb.sources.git.ownership import check_own_repository, confirm_repository, pinned
from smrweb.tracking import services
from smrweb.tracking.models import Project


class Repo:
    """One branch of one local repository. Reads go to a bare mirror smrweb owns (fetched from the agent's
    repository, with smrweb's configuration); only a rollback writes to the agent's repository, with
    plumbing that runs no hooks, filters or helpers (SAFE_CONFIG)."""

    def __init__(self, path: str, branch: str, *, pin: dict | None = None):
        self.own = check_own_repository(path, pin)
        self.path, self.branch = path, check_branch(branch)
        self.ref = f"refs/heads/{branch}"
        self.mirror = mirror_path(self.own.work_tree or self.own.git_dir)
        confirm_repository(self.own)
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
        return run_git(self.mirror, *args, **kwargs)

    def agent(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        """git in the agent's repository (its refs, and a rollback's writes), named explicitly."""
        return run_git(self.own.work_tree or self.own.git_dir, *args, repo_opts=self.own.opts(), **kwargs)

    def refresh(self) -> str:
        """Fetch the branch into the mirror (created on first use); the branch's head commit."""
        self.verify()
        if not os.path.isdir(self.mirror):
            root = os.path.dirname(self.mirror)
            os.makedirs(root, mode=0o700, exist_ok=True)
            run_git(root, "init", "--bare", "-q", os.path.basename(self.mirror))
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
            index_env = git_env(GIT_INDEX_FILE=os.path.join(tmp, "index"))
            self.agent("read-tree", parent, env=index_env)
            self.agent(
                "update-index", "--add", "--cacheinfo", f"{entry.mode},{entry.oid},{path}", env=index_env
            )
            tree = self.agent("write-tree", env=index_env).stdout.decode().strip()
        commit_env = git_env(
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
