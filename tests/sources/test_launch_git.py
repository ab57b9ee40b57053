"""Starting the next run of a git project: a new branch at the chosen commit in the project's repository
(a ref only: no checkout, no hook), which the project follows from then on; the run of that branch is
born linked to the run it came from, with the kickoff as its first message, and counts only what is
committed on it afterwards. Refusals leave the repository as it was."""

from __future__ import annotations

import os
import stat

import pytest

from smrweb.outbound import dispatch
from smrweb.tracking import queries, services
from smrweb.tracking.models import Artifact, AuditEvent, Project, Run, RunLaunch, RuntimeMessage, Submission
from smrweb.tracking.services import launches, rollbacks
from tests.factories import admin_project
from tests.sources.test_git import PATH, RepoPath, add_scores, commit, do_sync, git

pytestmark = pytest.mark.django_db


@pytest.fixture
def repo(tmp_path) -> RepoPath:
    """main: c1 (v1), c3 (v2), c4 (scores of c1 and c3), c5 (v3) — as tests/sources/test_git.py's."""
    repo = RepoPath(tmp_path / "agent repo")
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    repo.c1 = commit(repo, {PATH: "class Optimizer:  # v1\n"}, "first optimizer")
    repo.c3 = commit(repo, {PATH: "class Optimizer:  # v2, faster\n"}, "faster optimizer")
    repo.c4 = add_scores(repo, [{"score": 0.41, "commit": repo.c1}, {"score": 0.33, "commit": repo.c3}])
    repo.c5 = commit(repo, {PATH: "class Optimizer:  # v3, broken\n"}, "v3")
    return repo


@pytest.fixture
def gproject(alice, bob, repo) -> Project:
    scenario = services.create_scenario(
        key="opt", name="opt", artifact_path=PATH, score_metric="val_loss", direction="minimize"
    )
    project = admin_project(
        "gitproj", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="main", by=alice
    )
    services.add_member(project, bob, role="reviewer")
    return project


def launch(project, by, **fields):
    parent = Run.objects.get(project=project, external_id="git:main")
    fields = {
        "kickoff": "## Carry-forward: gitproj\n\nTry v4.",
        "idempotency_key": "git-launch-key-1",
        **fields,
    }
    made, _ = launches.request_launch(project, by=by, from_run=parent, **fields)
    return made, parent


def test_a_branch_is_made_at_the_chosen_commit_and_its_run_counts_only_its_own_work(gproject, repo, bob):
    do_sync(gproject)
    made, parent = launch(gproject, bob, git_commit=repo.c3[:10])
    assert queries.launch_defaults(gproject, parent).git_commit == repo.c5  # the form's prefill: the head

    assert dispatch.dispatch_launch(made.pk).outcome == "accepted"
    branch = f"main-next-{made.pk}"
    assert git(repo, "rev-parse", branch).strip() == repo.c3
    assert git(repo, "rev-parse", "main").strip() == repo.c5  # main and the work tree untouched
    assert git(repo, "status", "--porcelain") == ""
    made.refresh_from_db()
    run = Run.objects.get(project=gproject, external_id=f"git:{branch}")
    assert made.status == "confirmed" and made.run == run and run.parent == parent
    assert (run.git_branch, run.git_commit) == (branch, repo.c3)
    assert RuntimeMessage.objects.get(run=run).body == "## Carry-forward: gitproj\n\nTry v4."
    assert Project.objects.get(pk=gproject.pk).git_branch == branch
    followed = AuditEvent.objects.get(verb="project.branch_followed")
    assert followed.detail == {"branch": branch, "previous": "main", "launch": made.pk}
    assert f"created branch {branch} at {repo.c3[:12]}" in made.detail

    # The branch carries c1…c3 and no scores of its own yet: the sync finds nothing new.
    do_sync(gproject)
    assert not Artifact.objects.filter(run=run).exists() and not Submission.objects.filter(run=run).exists()

    # Work on the branch: one new version, one new score; the parent keeps its own.
    git(repo, "checkout", "-q", branch)
    c6 = commit(repo, {PATH: "class Optimizer:  # v4 from the launch\n"}, "v4")
    add_scores(repo, [{"score": 0.29, "commit": c6}])
    parent_counts = (
        Artifact.objects.filter(run=parent).count(),
        Submission.objects.filter(run=parent).count(),
    )
    report = do_sync(gproject)
    assert report.error == ""
    assert list(Artifact.objects.filter(run=run).values_list("commit", flat=True)) == [c6]
    assert list(Submission.objects.filter(run=run).values_list("score", flat=True)) == [0.29]
    assert (Artifact.objects.filter(run=parent).count(), Submission.objects.filter(run=parent).count()) == (
        parent_counts
    )


def test_scores_inherited_from_the_start_commit_are_not_counted_again(gproject, repo, bob):
    do_sync(gproject)
    made, parent = launch(gproject, bob)  # at the head of main, whose scores file has two lines
    assert dispatch.dispatch_launch(made.pk).outcome == "accepted"
    branch = f"main-next-{made.pk}"
    assert git(repo, "rev-parse", branch).strip() == repo.c5
    git(repo, "checkout", "-q", branch)
    add_scores(repo, [{"score": 0.21, "commit": repo.c5}])
    do_sync(gproject)
    run = Run.objects.get(external_id=f"git:{branch}")
    assert list(Submission.objects.filter(run=run).values_list("score", flat=True)) == [0.21]
    assert Submission.objects.filter(run=parent).count() == 2


def test_a_retried_attempt_finds_its_branch_and_another_commit_under_the_name_is_refused(gproject, repo, bob):
    do_sync(gproject)
    made, _ = launch(gproject, bob, git_commit=repo.c3)
    git(repo, "branch", f"main-next-{made.pk}", repo.c1)  # someone took the name, at another commit
    assert dispatch.dispatch_launch(made.pk).outcome == "failed"
    made.refresh_from_db()
    assert (
        made.status == "failed" and "already exists" in made.detail and "nothing was changed" in made.detail
    )
    assert git(repo, "rev-parse", f"main-next-{made.pk}").strip() == repo.c1
    assert Project.objects.get(pk=gproject.pk).git_branch == "main"

    again, _ = launch(gproject, bob, git_commit=repo.c3, idempotency_key="git-launch-key-2")
    git(repo, "branch", f"main-next-{again.pk}", repo.c3)  # an attempt that made it, then lost its answer
    assert dispatch.dispatch_launch(again.pk).outcome == "accepted"
    again.refresh_from_db()
    assert "already exists at" in again.detail and again.status == "confirmed"


def test_an_unknown_commit_is_refused_and_nothing_is_created(gproject, repo, bob):
    do_sync(gproject)
    made, _ = launch(gproject, bob, git_commit="deadbeef")
    assert dispatch.dispatch_launch(made.pk).outcome == "failed"
    made.refresh_from_db()
    assert "No commit deadbeef" in made.detail
    assert git(repo, "branch", "--list").split() == ["*", "main"]
    assert not RunLaunch.objects.filter(run__isnull=False).exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to any directory")
def test_a_repository_the_worker_cannot_write_is_refused_with_the_way_to_do_it_by_hand(gproject, repo, bob):
    do_sync(gproject)
    made, _ = launch(gproject, bob)
    gitdir = repo / ".git"
    mode = gitdir.stat().st_mode
    gitdir.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        assert dispatch.dispatch_launch(made.pk).outcome == "failed"
    finally:
        gitdir.chmod(mode)
    made.refresh_from_db()
    assert "cannot write to" in made.detail and f"git branch main-next-{made.pk}" in made.detail


def test_a_rollback_of_the_earlier_run_commits_on_its_own_branch_not_the_followed_one(gproject, repo, bob):
    do_sync(gproject)
    made, parent = launch(gproject, bob)
    dispatch.dispatch_launch(made.pk)
    new_branch_head = git(repo, "rev-parse", f"main-next-{made.pk}").strip()
    sub = Submission.objects.get(run=parent, commit=repo.c1)
    rollback = rollbacks.request_rollback(by=bob, reason="back", submission=sub).rollback
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    assert git(repo, "rev-parse", "main^").strip() == repo.c5  # a new commit on main, the run's branch
    assert git(repo, "rev-parse", f"main-next-{made.pk}").strip() == new_branch_head
