"""The writes a person asks of a git project: a rollback (a new commit restoring the artifact path's
bytes, published with a compare-and-swap) and the next run's branch; and the run id of a branch."""

from __future__ import annotations

import os
import re

from smrweb.sources.base import NotPossible
from smrweb.sources.git.cli import (
    COMMITTER,
    OID_RE,
    BranchMoved,
    GitFailed,
    check_artifact_path,
    check_branch,
)
from smrweb.sources.git.mirror import Repo
from smrweb.sources.git.worktree import path_is_clean, write_to_worktree
from smrweb.tracking.models import Rollback


def run_id_for(branch: str) -> str:
    """The run of a branch: `git:<branch>` with "/" written "~" (never in a ref name, so no clash)."""
    return "git:" + branch.replace("/", "~")


CAS_TRIES = 3  # compare-and-swap attempts when the branch moves under a rollback


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
            if not path_is_clean(repo, worktree, current, path):
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
        if path_is_clean(repo, worktree, current, path):
            notes.append(
                f"updated {path} in the work tree {worktree}"
                if write_to_worktree(repo, worktree, wanted, path)
                else f"could not update {path} in {worktree} (run `git checkout HEAD -- {path}` there)"
            )
        else:
            notes.append(f"{path} changed in {worktree} meanwhile: left as it is")
    return "; ".join(notes)


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
