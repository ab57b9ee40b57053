"""Red-team N3: an agent's repository is its own. The agent chooses what lies at the bound path, so each
way of leading git into another team's repository is set up here with real repositories: a `gitdir:`
file, a symlinked `.git`, a symlinked repository directory, a directory on the way swapped for a link,
alternates, a `commondir`, a `git worktree add` checkout, GIT_* variables in the worker's environment, and
smrweb's own mirror of another project. Each time the sync refuses (source health says why) and imports
nothing of the victim's, and a rollback leaves the victim's history and files as they were."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from smrweb.outbound import dispatch
from smrweb.sources.apply import apply_events
from smrweb.sources.git import cli as git_cli
from smrweb.sources.git import mirror as git_mirror
from smrweb.sources.git import ownership as git_ownership
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import (
    Artifact,
    Checkpoint,
    Project,
    Rollback,
    Run,
    Scenario,
    SourceHealth,
    Submission,
)
from tests.api.helpers import session_client
from tests.conftest import ROOT
from tests.sources.test_git import GIT_ENV, PATH, _rollback_to, add_scores, commit, do_sync, git

SECRET = "VICTIM-SECRET-OPTIMIZER = 42\n"


def snapshot(root: Path) -> dict[str, str]:
    """Every file and link under `root` (.git included), by content: "unchanged" means unchanged."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                seen[rel] = "-> " + os.readlink(full)
            elif os.path.isfile(full):
                seen[rel] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return seen


def history(repo: Path) -> str:
    return git(repo, "log", "--all", "--format=%H %s")


class World:
    """Two teams' repositories, both started from one template (so they share its first commit, as teams
    given the same scenario do): the victim's at <root>/team-b/agent, the agent's at <root>/team-a/agent."""

    def __init__(self, root: Path):
        self.root = root
        template = root / "template"
        template.mkdir()
        git(template, "init", "-q", "-b", "main")
        self.base = commit(template, {PATH: "class Optimizer:  # template\n"}, "template")
        for team in ("team-a", "team-b"):
            (root / team).mkdir()
            subprocess.run(
                ["git", "clone", "-q", str(template), str(root / team / "agent")], check=True, env=GIT_ENV
            )
        self.agent, self.victim = root / "team-a" / "agent", root / "team-b" / "agent"
        self.mine = commit(self.agent, {PATH: "class Optimizer:  # the agent's own\n"}, "agent v1")
        self.theirs = commit(self.victim, {PATH: SECRET}, "victim v1")
        add_scores(self.victim, [{"score": 0.12, "commit": self.theirs}])
        self.victim_commits = set(git(self.victim, "rev-list", "--all").split()) - {self.base}


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


@pytest.fixture
def project(alice, bob, world) -> Project:
    """The agent's project, bound by the operator while its repository was plain (pinned then), synced."""
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    project = services.create_project(
        "team-a",
        scenario=scenario,
        source="git",
        git_repo_path=str(world.agent),
        git_branch="main",
        pin_repository=git_ownership.pin_for_binding,
    )
    assert project.source_settings["git_pin"] == {
        "path": str(world.agent),
        "git_dir": str(world.agent / ".git"),
        "work_tree": str(world.agent),
    }
    services.add_member(project, alice, role="admin")
    services.add_member(project, bob, role="reviewer")
    report = do_sync(project)
    assert report.error == ""
    assert set(Artifact.objects.filter(run__project=project).values_list("commit", flat=True)) == {
        world.base,
        world.mine,
    }
    return project


def imported_from_victim(project, world) -> bool:
    commits = set(Artifact.objects.filter(run__project=project).values_list("commit", flat=True))
    commits |= set(Checkpoint.objects.filter(run__project=project).values_list("commit", flat=True))
    commits |= set(Submission.objects.filter(project=project).values_list("commit", flat=True))
    blobs = [a.blob for a in Artifact.objects.filter(run__project=project).select_related("blob")]
    secret = hashlib.sha256(SECRET.encode()).hexdigest()
    return bool(commits & world.victim_commits) or any(b.sha256 == secret for b in blobs)


# --- each redirect: what the agent does to its own directory once the project is bound -------------------


def gitdir_file(world: World) -> None:
    shutil.rmtree(world.agent / ".git")
    (world.agent / ".git").write_text(f"gitdir: {world.victim / '.git'}\n")


def symlinked_dotgit(world: World) -> None:
    shutil.rmtree(world.agent / ".git")
    (world.agent / ".git").symlink_to(world.victim / ".git")


def symlinked_repository_directory(world: World) -> None:
    world.agent.rename(world.root / "team-a" / "old")
    world.agent.symlink_to(world.victim)


def symlinked_directory_on_the_way(world: World) -> None:
    """Only the pin sees this one: the bound path's own parts are plain, a directory above is a link."""
    (world.root / "team-a").rename(world.root / "team-a-old")
    (world.root / "team-a").symlink_to(world.root / "team-b")


def alternates(world: World) -> None:
    """The agent's repository borrows the victim's objects and names the victim's head as its own."""
    (world.agent / ".git" / "objects" / "info").mkdir(exist_ok=True)
    (world.agent / ".git" / "objects" / "info" / "alternates").write_text(f"{world.victim}/.git/objects\n")
    head = git(world.victim, "rev-parse", "main").strip()
    (world.agent / ".git" / "refs" / "heads" / "main").write_text(head + "\n")
    (world.agent / ".git" / "packed-refs").unlink(missing_ok=True)


def commondir(world: World) -> None:
    (world.agent / ".git" / "commondir").write_text(f"{world.victim}/.git\n")


def worktree_link(world: World) -> None:
    """The agent's directory is a `git worktree add` checkout of the victim's repository."""
    shutil.rmtree(world.agent)
    git(world.victim, "worktree", "add", "-q", "--detach", str(world.agent))


REDIRECTS = {
    f.__name__: f
    for f in (
        gitdir_file,
        symlinked_dotgit,
        symlinked_repository_directory,
        symlinked_directory_on_the_way,
        alternates,
        commondir,
        worktree_link,
    )
}


@pytest.mark.parametrize("redirect", REDIRECTS)
def test_a_redirect_is_refused_by_the_sync_and_the_rollback_leaves_the_victim_alone(
    project, world, bob, redirect
):
    REDIRECTS[redirect](world)
    commit(world.victim, {PATH: "class Optimizer:  # victim v2\n"}, "victim v2")  # the victim works on
    before, log_before = snapshot(world.victim), history(world.victim)

    report = do_sync(project)

    assert report.error.startswith("foreign_repository: Refused "), report.error
    health = SourceHealth.objects.get(project=project)
    assert health.last_error_kind == "foreign_repository" and not health.ok
    assert "nothing was imported or written" in health.last_error
    assert not imported_from_victim(project, world)

    rollback = _rollback_to(project, bob, world.base)  # the template's commit: the victim has it too
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    rollback.refresh_from_db()
    assert rollback.status == "failed" and "foreign_repository: Refused" in rollback.detail
    assert history(world.victim) == log_before and snapshot(world.victim) == before
    assert (world.victim / PATH).read_text() == "class Optimizer:  # victim v2\n"


def test_git_variables_in_the_workers_environment_lead_nowhere(project, world, bob, monkeypatch):
    """The worker's own environment naming the victim (however it came to) never reaches git: the sync
    reads the agent's repository and the rollback writes there only."""
    victim_git = world.victim / ".git"
    for name, value in {
        "GIT_DIR": victim_git,
        "GIT_WORK_TREE": world.victim,
        "GIT_COMMON_DIR": victim_git,
        "GIT_OBJECT_DIRECTORY": victim_git / "objects",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": victim_git / "objects",
        "GIT_INDEX_FILE": victim_git / "index",
        "GIT_CONFIG_PARAMETERS": f"'core.worktree={world.victim}'",
    }.items():
        monkeypatch.setenv(name, str(value))
    before, log_before = snapshot(world.victim), history(world.victim)
    mine = commit(world.agent, {PATH: "class Optimizer:  # the agent's v2\n"}, "agent v2")

    assert do_sync(project).error == ""
    assert not imported_from_victim(project, world)
    assert Artifact.objects.filter(run__project=project, commit=mine).exists()

    rollback = _rollback_to(project, bob, world.base)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    assert git(world.agent, "rev-parse", "main^").strip() == mine
    assert (world.agent / PATH).read_text() == "class Optimizer:  # template\n"
    assert history(world.victim) == log_before and snapshot(world.victim) == before


def test_a_repository_with_linked_work_trees_of_its_own_is_refused(project, world):
    git(world.agent, "worktree", "add", "-q", "-b", "side", str(world.root / "team-a" / "side"))
    report = do_sync(project)
    assert report.error.startswith("foreign_repository: ") and "linked work trees" in report.error


def test_smrwebs_own_mirror_of_another_project_is_never_a_repository(alice, bob, world):
    """Binding a project to smrweb's mirror of the victim's project (`git-mirrors/<hash>.git`) is refused;
    a binding made before this check refuses to sync and to roll back."""
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    victims = services.create_project(
        "team-b", scenario=scenario, source="git", git_repo_path=str(world.victim), git_branch="main"
    )
    assert do_sync(victims).error == ""
    mirror = Path(git_cli.mirror_path(str(world.victim)))
    assert (mirror / "HEAD").is_file()

    with pytest.raises(InvalidInput, match="smrweb's"):
        services.create_project(
            "thief",
            scenario=scenario,
            source="git",
            git_repo_path=str(mirror),
            git_branch="main",
            pin_repository=git_ownership.pin_for_binding,
        )
    assert not Project.objects.filter(slug="thief").exists()

    thief = services.create_project(  # as bound before the check existed
        "thief", scenario=scenario, source="git", git_repo_path=str(mirror), git_branch="main"
    )
    services.add_member(thief, bob, role="reviewer")
    report = do_sync(thief)
    assert report.error.startswith("foreign_repository: Refused") and "smrweb's" in report.error
    assert not Run.objects.filter(project=thief).exists()
    # What an old sync would have left: the victim's checkpoint in the thief's project.
    apply_events(
        thief,
        "git:main",
        [
            (
                None,
                {
                    "id": f"git:{world.theirs}",
                    "type": "checkpoint",
                    "commit": world.theirs,
                    "ts": "2026-11-28T13:00:00Z",
                },
            )
        ],
    )
    before, mirror_before = snapshot(world.victim), snapshot(mirror)
    rollback = _rollback_to(thief, bob, world.theirs)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    assert snapshot(world.victim) == before and snapshot(mirror) == mirror_before


def test_an_unpinned_binding_is_pinned_by_its_first_sync_and_held_to_it(alice, world):
    """Bindings made before pins (or before the repository existed) get pinned by the first sync that
    passes; a later change of where the path leads is refused like any redirect."""
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    project = services.create_project(
        "late", scenario=scenario, source="git", git_repo_path=str(world.agent), git_branch="main"
    )
    assert "git_pin" not in project.source_settings
    assert do_sync(project).error == ""
    project.refresh_from_db()
    assert project.source_settings["git_pin"]["git_dir"] == str(world.agent / ".git")
    symlinked_directory_on_the_way(world)
    report = do_sync(project)
    assert report.error.startswith("foreign_repository: ") and "was pinned when it was bound" in report.error
    # The operator rebinding the project to another path pins that one anew.
    Project.objects.filter(pk=project.pk).update(git_repo_path=str(world.root / "team-a-old" / "agent"))
    assert do_sync(project).error == ""


def test_a_repository_that_does_not_exist_yet_is_bound_unpinned(alice, tmp_path):
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    project = services.create_project(
        "early",
        scenario=scenario,
        source="git",
        git_repo_path=str(tmp_path / "later"),
        git_branch="main",
        pin_repository=git_ownership.pin_for_binding,
    )
    assert "git_pin" not in project.source_settings


def test_a_bare_repository_is_still_followed_and_pinned(alice, world, tmp_path):
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(world.agent), str(bare)], check=True, env=GIT_ENV)
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    project = services.create_project(
        "bare",
        scenario=scenario,
        source="git",
        git_repo_path=str(bare),
        git_branch="main",
        pin_repository=git_ownership.pin_for_binding,
    )
    assert project.source_settings["git_pin"] == {"path": str(bare), "git_dir": str(bare), "work_tree": ""}
    assert do_sync(project).error == ""
    (bare / "objects" / "info" / "alternates").write_text(f"{world.victim}/.git/objects\n")
    assert do_sync(project).error.startswith("foreign_repository: ")


@pytest.mark.parametrize("redirect", ["symlinked_directory_on_the_way", "commondir"])
def test_the_work_tree_is_checked_again_right_before_it_is_written(
    project, world, bob, monkeypatch, redirect
):
    """A redirect made between publishing the commit and writing the work tree (here: right after the
    branch moved) stops the write: the commit stays in the agent's repository, the victim's files stay."""
    rollback = _rollback_to(project, bob, world.base)
    real_publish = git_mirror.Repo.publish
    agent_git = world.agent / ".git"

    def publish_then_redirect(self, *args, **kwargs):
        done = real_publish(self, *args, **kwargs)
        REDIRECTS[redirect](world)
        return done

    monkeypatch.setattr(git_mirror.Repo, "publish", publish_then_redirect)
    before = snapshot(world.victim)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    assert snapshot(world.victim) == before
    rollback.refresh_from_db()
    assert "updated" not in rollback.detail, rollback.detail
    if redirect == "symlinked_directory_on_the_way":
        agent_git = world.root / "team-a-old" / "agent" / ".git"
    (agent_git / "commondir").unlink(missing_ok=True)  # to read the agent's own refs again
    head = subprocess.run(
        ["git", f"--git-dir={agent_git}", "log", "-1", "--format=%s", "main"],
        capture_output=True,
        env=GIT_ENV,
        check=True,
    ).stdout.decode()
    assert head.startswith("smrweb rollback")  # in the agent's own repository


# --- the review's own reproduction -----------------------------------------------------------------------


def test_the_reviews_gitdir_redirect_end_to_end(alice, tmp_path, monkeypatch):
    """N3 as the review ran it: another team's repository, an agent directory whose .git is a `gitdir:`
    file naming it, `create_project --source git`, a sync, and alice's rollback through the API."""
    from smrweb import tasks

    victim, agent2 = tmp_path / "git" / "victim", tmp_path / "git" / "agent2"
    victim.mkdir(parents=True)
    git(victim, "init", "-q", "-b", "main")
    first = commit(victim, {PATH: SECRET}, "victim v1")
    add_scores(victim, [{"score": 0.5, "commit": first}])
    agent2.mkdir()
    (agent2 / ".git").write_text(f"gitdir: {victim}/.git\n")
    call_command("load_presets", verbosity=0)

    # The operator's normal binding is refused, naming the file; nothing is created.
    with pytest.raises(CommandError, match=r"its \.git is a file"):
        call_command(
            "create_project",
            "gitredir",
            "--scenario",
            "optimizer-hill-climb",
            "--source",
            "git",
            "--git-repo",
            str(agent2),
            "--git-branch",
            "main",
        )
    assert not Project.objects.filter(slug="gitredir").exists()

    # The same binding made before the fix (or the file written after binding): the sync refuses.
    project = services.create_project(
        "gitredir",
        scenario=Scenario.objects.get(key="optimizer-hill-climb"),
        source="git",
        git_repo_path=str(agent2),
        git_branch="main",
    )
    services.add_member(project, alice, role="admin")
    report = do_sync(project)
    assert report.error.startswith("foreign_repository: Refused")
    health = SourceHealth.objects.get(project=project)
    assert health.last_error_kind == "foreign_repository" and ".git is a file" in health.last_error
    assert not Artifact.objects.filter(run__project=project).exists()
    assert not Run.objects.filter(project=project).exists()

    # The victim moves on; alice (admin of gitredir only) asks for the review's rollback, to the
    # checkpoint the old sync had imported.
    apply_events(
        project,
        "git:main",
        [(None, {"id": f"git:{first}", "type": "checkpoint", "commit": first, "ts": "2026-11-28T13:12:00Z"})],
    )
    commit(victim, {PATH: "VICTIM v2\n"}, "victim v2")
    before, log_before = snapshot(victim), history(victim)
    monkeypatch.setattr(tasks.dispatch_rollback, "delay_on_commit", lambda pk: None)
    answer = session_client(alice).post(
        "/api/v1/projects/gitredir/runs/git:main/rollback",
        {"checkpoint": f"git:{first}", "reason": "back to v1"},
        format="json",
    )
    assert answer.status_code == 202, answer.json()
    rollback = Rollback.objects.get(pk=answer.json()["id"])
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    rollback.refresh_from_db()
    assert "foreign_repository: Refused" in rollback.detail and "committed" not in rollback.detail
    assert history(victim) == log_before and snapshot(victim) == before
    assert (victim / PATH).read_text() == "VICTIM v2\n"


# --- git's private HOME -------------------------------------------------------------------------------


def test_git_leaves_no_temporary_home_behind(tmp_path):
    """The review found six empty `smrweb-git-home-*` directories: one per process that ever ran git. A
    process that runs git and exits leaves nothing in the temporary directory, and every process uses the
    same private home."""
    script = (
        "import django; django.setup()\n"
        "from smrweb.sources.git import cli\n"
        "cli.check_branch('main')\n"
        "print(cli.git_env()['HOME'])\n"
    )
    homes = set()
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "TMPDIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "smrweb.settings"},
            capture_output=True,
            check=True,
            timeout=60,
        )
        homes.add(out.stdout.decode().strip().splitlines()[-1])
    assert os.listdir(tmp_path) == []
    assert len(homes) == 1 and os.path.isdir(homes.pop())
