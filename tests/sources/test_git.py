"""The git-workspace source against real repositories built in tmp_path: commits that touch the artifact
path become artifact versions (bytes from `git show`), the scores file becomes submissions, a rollback
is a new commit (never a rewrite), audited; failures land on source health."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from smrweb.outbound import dispatch
from smrweb.sources import sync
from smrweb.sources.base import NotPossible
from smrweb.sources.git import cli as git_cli
from smrweb.sources.git import mirror as git_mirror
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    Artifact,
    AuditEvent,
    Checkpoint,
    Project,
    Rollback,
    Run,
    SourceHealth,
    Submission,
)
from smrweb.tracking.services import rollbacks
from tests.conftest import ROOT, wait_for
from tests.factories import admin_project

PATH = "submission/optimizer.py"
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env=GIT_ENV, input=input
    ).stdout.decode()


def git_bytes(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env=GIT_ENV
    ).stdout


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "--", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def add_scores(repo: Path, lines: list[dict], message: str = "scores") -> str:
    scores = repo / ".smrweb" / "scores.jsonl"
    scores.parent.mkdir(exist_ok=True)
    with scores.open("a") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    return commit(repo, {".smrweb/scores.jsonl": scores.read_text()}, message)


def touching(repo: Path, branch: str = "main") -> list[str]:
    return git(repo, "log", "--reverse", "--format=%H", branch, "--", PATH).split()


class RepoPath(type(Path())):
    """A repository's path that also carries its commits (c1 … c5) as attributes."""


@pytest.fixture
def repo(tmp_path) -> Path:
    """main: c1 (optimizer v1 + README), c2 (README only), c3 (optimizer v2), c4 (scores for c1 and c3),
    c5 (optimizer v3)."""
    repo = RepoPath(tmp_path / "agent repo")  # a space in the path on purpose
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    repo.c1 = commit(repo, {PATH: "class Optimizer:  # v1\n", "README.md": "hello\n"}, "first optimizer")
    repo.c2 = commit(repo, {"README.md": "hello again\n"}, "docs only")
    repo.c3 = commit(repo, {PATH: "class Optimizer:  # v2, faster\n"}, "faster optimizer")
    repo.c4 = add_scores(
        repo,
        [
            {"score": 0.41, "commit": repo.c1, "note": "baseline"},
            {"score": 0.33, "commit": repo.c3[:10], "ts": "2026-01-02T03:04:05Z"},
        ],
    )
    repo.c5 = commit(repo, {PATH: "class Optimizer:  # v3, broken\n", "notes/log.txt": "tried lr=1\n"}, "v3")
    return repo


@pytest.fixture
def scenario(db):
    return services.create_scenario(
        key="opt",
        name="opt",
        artifact_path=PATH,
        artifact_kind="python_source",
        score_metric="val_loss",
        direction="minimize",
        score_min=0,
    )


@pytest.fixture
def gproject(alice, bob, scenario, repo) -> Project:
    project = admin_project(
        "gitproj", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="main", by=alice
    )
    services.add_member(project, bob, role="reviewer")
    return project


def counts(project) -> tuple[int, ...]:
    return (
        Artifact.objects.filter(run__project=project).count(),
        Checkpoint.objects.filter(run__project=project).count(),
        Submission.objects.filter(project=project).count(),
        AuditEvent.objects.filter(project=project).count(),
    )


def do_sync(project) -> sync.SyncReport:
    return sync.sync_project(Project.objects.get(pk=project.pk), owner="test")


# --- sync -----------------------------------------------------------------------------------------


def test_each_commit_touching_the_path_is_one_artifact_version_with_its_bytes_and_lineage(gproject, repo):
    report = do_sync(gproject)

    assert report.error == "" and report.synced == 1
    run = Run.objects.get(project=gproject)
    assert run.external_id == "git:main" and run.git_branch == "main" and run.git_commit == repo.c5
    commits = touching(repo)
    assert commits == [repo.c1, repo.c3, repo.c5]
    versions = list(Artifact.objects.filter(run=run).order_by("id").select_related("blob"))
    assert [a.commit for a in versions] == commits
    for artifact, sha in zip(versions, commits, strict=True):
        shown = git_bytes(repo, "show", f"{sha}:{PATH}")
        assert artifact.path == PATH and artifact.kind == "python_source"
        assert artifact.blob.sha256 == hashlib.sha256(shown).hexdigest() and artifact.blob.size == len(shown)
        with services.open_blob(artifact.blob) as fh:
            assert fh.read() == shown
    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("ts", "id"))
    assert [(c.external_id, c.commit, c.restorable) for c in checkpoints] == [
        (f"git:{sha}", sha, True) for sha in commits
    ]
    assert checkpoints[1].label.startswith(repo.c3[:10]) and "faster optimizer" in checkpoints[1].label
    assert run.source_cursor["commit"] == repo.c5
    health = SourceHealth.objects.get(project=gproject)
    assert health.ok and health.last_error == ""


def test_scores_file_lines_become_submissions_linked_to_the_bytes_of_their_commit(gproject, repo):
    do_sync(gproject)

    subs = {s.commit: s for s in Submission.objects.filter(project=gproject).select_related("artifact")}
    assert set(subs) == {repo.c1, repo.c3}  # the abbreviated hash was resolved
    first, second = subs[repo.c1], subs[repo.c3]
    assert (first.score, second.score) == (0.41, 0.33)
    assert first.details == {"note": "baseline"} and second.ts.isoformat() == "2026-01-02T03:04:05+00:00"
    assert first.artifact.commit == repo.c1 and second.artifact.commit == repo.c3
    assert re.fullmatch(rf"git:{repo.c1}:[0-9a-f]{{16}}", first.event_id)
    run = Run.objects.get(project=gproject)
    assert (run.score_count, run.best_score) == (2, 0.33)  # the scenario minimizes


def test_syncing_again_changes_nothing_and_a_new_commit_adds_exactly_one_version(gproject, repo):
    do_sync(gproject)
    before = counts(gproject)
    assert before[:3] == (3, 3, 2)

    again = do_sync(gproject)
    assert counts(gproject) == before and again.artifacts_pulled == 0 and again.events_accepted == 0

    commit(repo, {"README.md": "unrelated\n"}, "unrelated")
    do_sync(gproject)
    assert counts(gproject) == before

    c6 = commit(repo, {PATH: "class Optimizer:  # v4\n"}, "v4")
    report = do_sync(gproject)
    assert report.artifacts_pulled == 1
    artifacts, checkpoints, subs, _ = counts(gproject)
    assert (artifacts, checkpoints, subs) == (4, 4, 2)
    assert Artifact.objects.filter(run__project=gproject).order_by("-id").first().commit == c6

    add_scores(repo, [{"score": 0.2, "commit": c6}])
    do_sync(gproject)
    assert Submission.objects.filter(project=gproject).count() == 3
    assert Submission.objects.get(commit=c6).artifact.commit == c6


def test_a_rewritten_branch_is_rescanned_without_duplicates(gproject, repo):
    do_sync(gproject)
    git(repo, "reset", "-q", "--hard", repo.c4)  # drop c5: the cursor is no longer an ancestor
    c5b = commit(repo, {PATH: "class Optimizer:  # v3b\n"}, "v3 again")
    do_sync(gproject)
    assert sorted(Artifact.objects.filter(run__project=gproject).values_list("commit", flat=True)) == sorted(
        [repo.c1, repo.c3, repo.c5, c5b]
    )


def test_the_sync_task_runs_on_a_real_worker(transactional_db, alice, scenario, repo, celery_worker):
    from smrweb.tasks import sync_project

    project = admin_project(
        "gitworker", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="main", by=alice
    )
    sync_project.delay(project.pk)

    wait_for(lambda: SourceHealth.objects.filter(project=project, last_success_at__isnull=False).exists())
    assert Artifact.objects.filter(run__project=project).count() == 3
    assert Submission.objects.filter(project=project).count() == 2


def test_beat_claims_git_projects_as_due(gproject):
    services.source_health(gproject)
    assert gproject.pk in services.claim_due_projects(hold_seconds=5)


# --- failures ----------------------------------------------------------------------------------------


def test_a_missing_repository_is_a_recorded_failure_with_its_message(alice, scenario, tmp_path):
    project = admin_project(
        "gone",
        scenario=scenario,
        source="git",
        git_repo_path=str(tmp_path / "nope"),
        git_branch="main",
        by=alice,
    )
    report = do_sync(project)
    health = SourceHealth.objects.get(project=project)
    assert report.error.startswith("not_found")
    assert health.consecutive_failures == 1 and health.last_error_kind == "not_found"
    assert f"No repository at {tmp_path / 'nope'}" in health.last_error
    assert not Run.objects.filter(project=project).exists()


def test_a_plain_directory_inside_another_repository_is_not_that_repository(alice, scenario, repo):
    (repo / "sub").mkdir()
    project = admin_project(
        "inner", scenario=scenario, source="git", git_repo_path=str(repo / "sub"), git_branch="main", by=alice
    )
    do_sync(project)
    health = SourceHealth.objects.get(project=project)
    assert health.last_error_kind == "not_found" and "is not a git repository" in health.last_error


def test_a_missing_branch_and_a_bad_scores_line_are_recorded_failures(alice, scenario, repo):
    project = admin_project(
        "nobranch",
        scenario=scenario,
        source="git",
        git_repo_path=str(repo),
        git_branch="feature/none",
        by=alice,
    )
    do_sync(project)
    health = SourceHealth.objects.get(project=project)
    assert health.last_error == f"No branch 'feature/none' in {repo}."

    bad = admin_project(
        "badscores", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="main", by=alice
    )
    add_scores(repo, [{"score": "high", "commit": repo.c1}])
    do_sync(bad)
    health = SourceHealth.objects.get(project=bad)
    assert health.last_error_kind == "malformed"
    assert health.last_error == ".smrweb/scores.jsonl line 3: `score` must be a finite number."
    assert Artifact.objects.filter(run__project=bad).count() == 3  # what came before the fault is kept


@pytest.mark.parametrize(
    "branch", ["-rf", "a..b", "x y", "@{-1}", "foo.lock", "a//b", "HEAD~1", "main;rm", "/abs"]
)
def test_odd_branch_names_are_refused(alice, scenario, repo, branch):
    with pytest.raises(InvalidInput):
        services.create_project(
            "odd", scenario=scenario, source="git", git_repo_path=str(repo), git_branch=branch
        )
    with pytest.raises(NotPossible):
        git_cli.check_branch(branch)
    with pytest.raises(CommandError):
        call_command(
            "create_project",
            "odd",
            "--scenario",
            "opt",
            "--source",
            "git",
            "--git-repo",
            str(repo),
            "--git-branch",
            branch,
        )
    assert not Project.objects.filter(slug="odd").exists()


def test_a_branch_with_a_slash_is_followed_under_a_run_id_of_its_own(alice, scenario, repo):
    git(repo, "branch", "agent/try-1", repo.c3)
    project = admin_project(
        "slash", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="agent/try-1", by=alice
    )
    do_sync(project)
    run = Run.objects.get(project=project)
    assert run.external_id == "git:agent~try-1"
    assert list(Artifact.objects.filter(run=run).order_by("id").values_list("commit", flat=True)) == [
        repo.c1,
        repo.c3,
    ]


# --- rollback ------------------------------------------------------------------------------------------


def _rollback_to(project, bob, sha, reason="v3 broke the benchmark"):
    checkpoint = Checkpoint.objects.get(run__project=project, commit=sha)
    requested = rollbacks.request_rollback(by=bob, reason=reason, checkpoint=checkpoint)
    assert requested.created
    return requested.rollback


def test_a_rollback_is_a_new_commit_restoring_the_path_and_the_next_sync_adds_the_version(
    gproject, repo, bob
):
    do_sync(gproject)
    old_head = git(repo, "rev-parse", "main").strip()
    rollback = _rollback_to(gproject, bob, repo.c3)

    assert dispatch.dispatch_rollback(rollback.pk, last_try=False).outcome == "applied"

    new_head = git(repo, "rev-parse", "main").strip()
    assert new_head != old_head
    assert git(repo, "rev-parse", f"{new_head}^@").split() == [old_head]  # one parent: the old head
    assert git_bytes(repo, "show", f"{new_head}:{PATH}") == git_bytes(repo, "show", f"{repo.c3}:{PATH}")
    changed = git(repo, "diff", "--name-only", old_head, new_head).split()
    assert changed == [PATH]  # every other file is unchanged
    for sha in (repo.c1, repo.c2, repo.c3, repo.c4, repo.c5):  # history kept, nothing rewritten
        subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", sha, "main"], check=True, env=GIT_ENV
        )
    message = git(repo, "log", "-1", "--format=%B", new_head)
    assert message.startswith(f"smrweb rollback: restore {PATH} from {repo.c3[:10]}\n")
    assert f"Smrweb-Rollback: gitproj#{rollback.pk}" in message and "Requested-By: bob" in message
    assert f"Restored-From: {repo.c3}" in message and "v3 broke the benchmark" in message
    # The repository's work tree had main checked out and was clean: it follows the new commit.
    assert (repo / PATH).read_text() == "class Optimizer:  # v2, faster\n"
    assert git(repo, "status", "--porcelain") == ""

    rollback.refresh_from_db()
    assert rollback.status == "applied" and f"committed {new_head[:12]} on main" in rollback.detail
    verbs = list(
        AuditEvent.objects.filter(object_type="rollback", object_id=str(rollback.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == ["rollback.requested", "rollback.dispatched", "rollback.applied"]

    report = do_sync(gproject)
    assert report.artifacts_pulled == 1
    restored = Artifact.objects.filter(run__project=gproject).select_related("blob").get(commit=new_head)
    assert restored.blob.sha256 == Artifact.objects.get(run__project=gproject, commit=repo.c3).blob.sha256
    assert Artifact.objects.filter(run__project=gproject).count() == 4  # same bytes, a version of its own

    # A redelivered dispatch of the applied rollback does nothing more.
    assert dispatch.dispatch_rollback(rollback.pk, last_try=False).outcome == "skipped"
    assert git(repo, "rev-parse", "main").strip() == new_head


def test_a_rollback_to_a_submission_through_the_real_worker(
    transactional_db, alice, bob, scenario, repo, celery_worker
):
    from smrweb.tasks import dispatch_rollback

    project = admin_project(
        "gitroll", scenario=scenario, source="git", git_repo_path=str(repo), git_branch="main", by=alice
    )
    services.add_member(project, bob, role="reviewer")
    do_sync(project)
    sub = Submission.objects.get(project=project, commit=repo.c1)
    requested = rollbacks.request_rollback(by=bob, reason="back to the baseline", submission=sub)
    dispatch_rollback.delay(requested.rollback.pk)

    wait_for(lambda: Rollback.objects.get(pk=requested.rollback.pk).status in ("applied", "failed"))
    rollback = Rollback.objects.get(pk=requested.rollback.pk)
    assert rollback.status == "applied", rollback.detail
    head = git(repo, "rev-parse", "main").strip()
    assert git(repo, "rev-parse", f"{head}^").strip() == repo.c5
    assert git_bytes(repo, "show", f"{head}:{PATH}") == b"class Optimizer:  # v1\n"


def test_a_branch_that_moves_once_is_retried_on_the_new_head(gproject, repo, bob, monkeypatch):
    do_sync(gproject)
    rollback = _rollback_to(gproject, bob, repo.c1)
    real = git_mirror.Repo.commit_with
    moved = []

    def racing(self, parent, *args, **kwargs):
        built = real(self, parent, *args, **kwargs)
        if not moved:  # someone commits between our read of the head and update-ref
            moved.append(commit(repo, {"notes/race.txt": "agent was faster\n"}, "agent commit"))
        return built

    monkeypatch.setattr(git_mirror.Repo, "commit_with", racing)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    head = git(repo, "rev-parse", "main").strip()
    assert git(repo, "rev-parse", f"{head}^").strip() == moved[0]  # built on the moved head
    assert git_bytes(repo, "show", f"{head}:{PATH}") == b"class Optimizer:  # v1\n"
    assert git_bytes(repo, "show", f"{head}:notes/race.txt") == b"agent was faster\n"  # their commit kept


def test_a_branch_that_keeps_moving_fails_clearly_and_changes_nothing_of_ours(
    gproject, repo, bob, monkeypatch
):
    do_sync(gproject)
    rollback = _rollback_to(gproject, bob, repo.c1)
    real = git_mirror.Repo.commit_with
    agent_commits = []

    def racing(self, parent, *args, **kwargs):
        built = real(self, parent, *args, **kwargs)
        agent_commits.append(commit(repo, {"notes/race.txt": f"{len(agent_commits)}\n"}, "agent commit"))
        return built

    monkeypatch.setattr(git_mirror.Repo, "commit_with", racing)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    rollback.refresh_from_db()
    assert rollback.status == "failed"
    assert "conflict: main moved 3 times while the rollback commit was being published" in rollback.detail
    assert git(repo, "rev-parse", "main").strip() == agent_commits[-1]  # the agent's work, not ours
    assert "smrweb rollback" not in git(repo, "log", "--format=%s", "main")
    assert AuditEvent.objects.filter(verb="rollback.failed", object_id=str(rollback.pk)).count() == 1


def test_uncommitted_changes_to_the_path_refuse_the_rollback(gproject, repo, bob):
    do_sync(gproject)
    (repo / PATH).write_text("class Optimizer:  # work in progress\n")
    head = git(repo, "rev-parse", "main").strip()
    rollback = _rollback_to(gproject, bob, repo.c1)

    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    rollback.refresh_from_db()
    assert (
        "has uncommitted changes in the work tree" in rollback.detail
        and "Nothing was changed" in rollback.detail
    )
    assert git(repo, "rev-parse", "main").strip() == head
    assert (repo / PATH).read_text() == "class Optimizer:  # work in progress\n"  # untouched


def test_a_bare_repository_is_synced_and_rolled_back(alice, bob, scenario, repo, tmp_path):
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True, env=GIT_ENV)
    project = admin_project(
        "bare", scenario=scenario, source="git", git_repo_path=str(bare), git_branch="main", by=alice
    )
    services.add_member(project, bob, role="reviewer")
    do_sync(project)
    assert Artifact.objects.filter(run__project=project).count() == 3
    rollback = _rollback_to(project, bob, repo.c1)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    assert git_bytes(bare, "show", f"main:{PATH}") == b"class Optimizer:  # v1\n"
    assert git(bare, "rev-parse", "main^").strip() == repo.c5


# --- the docs example ------------------------------------------------------------------------------------


def _doc_blocks() -> list[str]:
    text = (ROOT / "docs" / "integrations.md").read_text()
    section = text.split("## Git workspace source", 1)[1]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


def test_the_docs_example_runs(alice, tmp_path):
    setup, commands = _doc_blocks()[:2]
    # The first block is plain shell: run it as written. The second holds manage.py commands: their
    # arguments are expanded by the same shell, then the commands run in this process (test database).
    lines = [line for line in commands.splitlines() if line.startswith("python manage.py ")]
    script = (
        setup
        + "\n"
        + "\n".join(
            'printf "%s\\0" ' + line[len("python manage.py ") :] + '\nprintf "\\n--\\n"' for line in lines
        )
    )
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        env={**GIT_ENV, "PATH": os.environ["PATH"]},
    ).stdout.decode()
    argvs = [[a for a in chunk.strip("\n").split("\0") if a] for chunk in out.split("\n--\n")[:-1]]
    assert [a[0] for a in argvs] == ["load_presets", "create_project"]
    for argv in argvs:
        call_command(*argv)
    project = Project.objects.get(slug="my-agent")
    assert (project.source, project.git_branch) == ("git", "main")
    do_sync(project)
    assert Artifact.objects.filter(run__project=project).count() == 2
    sub = Submission.objects.get(project=project)
    assert sub.score == 0.83 and sub.details == {"note": "lr warmup"} and sub.artifact.commit == sub.commit
    assert shlex.split(lines[1])[2] == "create_project"
