"""Red-team finding 3: the agent owns the repository smrweb reads, so its `.git/config`, hooks and
attributes are hostile input. Every trick the review used (and the other ways git runs a program) is set
up in one repository; each is first shown to run under plain git, then a sync and a rollback through
smrweb run none of them, and git never sees the worker's environment."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from smrweb.outbound import dispatch
from smrweb.sources.git import cli as git_cli
from smrweb.sources.git import mirror as git_mirror
from smrweb.sources.git import worktree as git_worktree
from smrweb.tracking import services
from smrweb.tracking.models import Project, Submission
from tests.factories import admin_project
from tests.sources.test_git import GIT_ENV, PATH, _rollback_to, add_scores, commit, do_sync, git

HOOKS = (
    "reference-transaction",
    "post-index-change",
    "post-checkout",
    "pre-commit",
    "post-commit",
    "commit-msg",
    "pre-auto-gc",
    "post-rewrite",
    "pre-receive",
    "update",
    "post-update",
    "pre-push",
    "post-merge",
    "fsmonitor-watchman",
)


def evil_program(path: Path, marker: Path, name: str) -> str:
    """A program that records that it ran (and the environment it ran with), then behaves harmlessly."""
    path.write_text(
        f"#!/bin/sh\necho \"{name} $*\" >> '{marker}'\nenv >> '{marker}.env'\ncat >/dev/null 2>&1\nexit 0\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


class Hostile:
    def __init__(self, root: Path):
        self.root, self.repo, self.marker = root, root / "agent", root / "AGENT-CODE-RAN"
        repo = self.repo
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        self.c1 = commit(repo, {PATH: "class Optimizer:  # v1\n"}, "v1")
        self.c2 = commit(repo, {PATH: "class Optimizer:  # v2\n"}, "v2")
        # A commit with a (fake) signature header, made the branch head, and a scores line without `ts`
        # for it: smrweb reads the commit's time, which is where gpg.program ran (the review's trick).
        tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
        raw = (
            f"tree {tree}\nparent {self.c2}\nauthor a <a@x> 1700000000 +0000\ncommitter a <a@x> 1700000000 "
            f"+0000\n"
            "gpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n"
        )
        self.signed = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=raw.encode()).strip()
        git(repo, "update-ref", "refs/heads/main", self.signed)
        git(repo, "reset", "-q", "--hard", "main")
        self.c3 = add_scores(repo, [{"score": 0.5, "commit": self.signed}, {"score": 0.7, "commit": self.c1}])
        self.c4 = commit(repo, {PATH: "class Optimizer:  # v3, broken\n"}, "v3")
        # Now the traps, in the repository's own config, an included config, hooks and attributes.
        bin_ = root / "bin"
        bin_.mkdir()
        prog = {
            name: evil_program(bin_ / name, self.marker, name)
            for name in (
                "gpg",
                "fsmonitor",
                "filter",
                "textconv",
                "extdiff",
                "pager",
                "ssh",
                "askpass",
                "packhook",
                "altrefs",
                "editor",
                "credential",
            )
        }
        git(repo, "config", "log.showSignature", "true")
        git(repo, "config", "gpg.program", prog["gpg"])
        git(repo, "config", "core.fsmonitor", prog["fsmonitor"])
        git(repo, "config", "diff.external", prog["extdiff"])
        git(repo, "config", "core.pager", prog["pager"])
        git(repo, "config", "filter.evil.clean", prog["filter"])
        git(repo, "config", "filter.evil.smudge", prog["filter"])
        git(repo, "config", "diff.evil.textconv", prog["textconv"])
        git(repo, "config", "core.sshCommand", prog["ssh"])
        git(repo, "config", "core.askPass", prog["askpass"])
        git(repo, "config", "uploadpack.packObjectsHook", prog["packhook"])
        git(repo, "config", "core.alternateRefsCommand", prog["altrefs"])
        git(repo, "config", "core.editor", prog["editor"])
        git(repo, "config", "credential.helper", f"!{prog['credential']}")
        included = root / "included.config"
        included.write_text(
            f'[gpg "ssh"]\n\tprogram = {prog["gpg"]}\n[core]\n\thooksPath = {root / "hooks2"}\n'
        )
        git(repo, "config", "include.path", str(included))
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")
        for hooks in (repo / ".git" / "hooks", root / "hooks2"):
            hooks.mkdir(exist_ok=True)
            for hook in HOOKS:
                evil_program(hooks / hook, self.marker, f"hook {hook}")

    def ran(self) -> str:
        return self.marker.read_text() if self.marker.exists() else ""

    def clear(self) -> None:
        for path in (self.marker, Path(f"{self.marker}.env")):
            path.unlink(missing_ok=True)


@pytest.fixture
def hostile(tmp_path) -> Hostile:
    return Hostile(tmp_path)


@pytest.fixture
def hproject(alice, bob, hostile) -> Project:
    scenario = services.create_scenario(
        key="opt",
        name="opt",
        artifact_path=PATH,
        artifact_kind="python_source",
        score_metric="val_loss",
        direction="minimize",
    )
    project = admin_project(
        "hostile",
        scenario=scenario,
        source="git",
        git_repo_path=str(hostile.repo),
        git_branch="main",
        by=alice,
    )
    services.add_member(project, bob, role="reviewer")
    return project


def plain_git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], env=GIT_ENV, capture_output=True, timeout=30)


# What plain git runs in that repository: each trick is live (so the tests below can fail).
TRICKS = {
    "gpg.program via log.showSignature": (lambda h: ("show", "-s", "--format=%ct", h.signed), "gpg"),
    "reference-transaction hook (from the included hooksPath)": (
        lambda h: ("update-ref", "refs/heads/x", "HEAD"),
        "hook reference-transaction",
    ),
    "core.fsmonitor": (lambda h: ("status", "--porcelain"), "fsmonitor"),
    "clean filter from info/attributes": (lambda h: ("diff", "--quiet", "HEAD", "--", PATH), "filter"),
    "diff.external": (lambda h: ("diff", f"{h.c1}", f"{h.c2}"), "extdiff"),
}


@pytest.mark.parametrize("trick", TRICKS)
def test_each_trick_runs_under_plain_git(hostile, trick):
    command, name = TRICKS[trick]
    (hostile.repo / PATH).touch()  # stat-dirty, so that git looks at the file again
    os.utime(hostile.repo / PATH, (1, 1))
    plain_git(hostile.repo, *command(hostile))
    assert name in hostile.ran(), f"the trap is not live: {hostile.ran()!r}"


def test_a_sync_runs_none_of_it(hproject, hostile):
    report = do_sync(hproject)
    assert report.error == "" and report.synced == 1
    assert hostile.ran() == ""
    scores = sorted(Submission.objects.filter(project=hproject).values_list("score", "commit"))
    assert scores == [
        (0.5, hostile.signed),
        (0.7, hostile.c1),
    ]  # the signed commit's time was read all the same
    assert not os.path.exists(f"{hostile.marker}.env")


def test_a_rollback_runs_none_of_it_and_still_lands(hproject, hostile, bob):
    do_sync(hproject)
    (hostile.repo / PATH).touch()
    rollback = _rollback_to(hproject, bob, hostile.c1)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    assert hostile.ran() == ""
    head = git(hostile.repo, "rev-parse", "main").strip()
    assert git(hostile.repo, "cat-file", "-p", f"{head}:{PATH}") == "class Optimizer:  # v1\n"
    assert (hostile.repo / PATH).read_text() == "class Optimizer:  # v1\n"  # the work tree, written by smrweb
    status = subprocess.run(
        [
            "git",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "filter.evil.clean=",
            "-c",
            "filter.evil.smudge=",
            "-C",
            str(hostile.repo),
            "status",
            "--porcelain",
            "--",
            PATH,
        ],
        env=GIT_ENV,
        capture_output=True,
    ).stdout
    assert status == b""  # index and file agree with the new commit
    assert do_sync(hproject).error == "" and hostile.ran() == ""


def test_a_symlinked_artifact_path_is_never_written_through(hproject, hostile, bob, tmp_path):
    do_sync(hproject)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the agent's to change\n")
    (hostile.repo / PATH).unlink()
    (hostile.repo / PATH).symlink_to(outside)
    rollback = _rollback_to(hproject, bob, hostile.c1)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    rollback.refresh_from_db()
    assert "uncommitted changes in the work tree" in rollback.detail
    assert outside.read_text() == "not the agent's to change\n" and hostile.ran() == ""


def test_reads_come_from_smrwebs_own_mirror(hproject, hostile):
    do_sync(hproject)
    mirror = Path(git_cli.mirror_path(str(hostile.repo)))
    assert (mirror / "HEAD").is_file() and not (mirror / "hooks" / "reference-transaction").exists()
    config = (mirror / "config").read_text()
    assert (
        "gpg" not in config and "fsmonitor" not in config and oct(mirror.parent.stat().st_mode)[-3:] == "700"
    )
    assert git(mirror, "rev-parse", "refs/heads/main").strip() == hostile.c4


def test_git_never_sees_the_workers_environment(monkeypatch):
    for name in (
        "SECRET_KEY",
        "DATABASE_URL",
        "SMRWEB_SMR_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "GIT_DIR",
        "GIT_CONFIG_PARAMETERS",
        "LD_PRELOAD",
    ):
        monkeypatch.setenv(name, "leak")
    env = git_cli.git_env(GIT_CEILING_DIRECTORIES="/")
    assert "leak" not in env.values()
    assert set(env) <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_GLOBAL",
        "GIT_ATTR_NOSYSTEM",
        "GIT_TERMINAL_PROMPT",
        "GIT_OPTIONAL_LOCKS",
        "GIT_NO_LAZY_FETCH",
        "GIT_LITERAL_PATHSPECS",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_PROTOCOL_FROM_USER",
        "GIT_ALLOW_PROTOCOL",
        "GIT_CEILING_DIRECTORIES",
    }
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and os.listdir(env["HOME"]) == []


def test_a_hostile_path_cannot_be_followed_by_a_non_staff_user(mallory_can_add):
    """Binding a repository is for staff and users given `bind_source` (finding 1's rule)."""
    from smrweb.tracking.errors import NotAllowed

    with pytest.raises(NotAllowed):
        services.create_project(
            "x", source="git", git_repo_path="/tmp/r", git_branch="main", by=mallory_can_add
        )


@pytest.fixture
def mallory_can_add(db):
    from tests.factories import UserFactory, grant

    user = UserFactory(username="mallory")
    grant(user, "add_project")
    return user


def test_a_symlink_or_hard_link_on_the_way_is_never_written_through(hproject, hostile, tmp_path):
    """The check and the write are one walk of directories opened without following links, so a link
    swapped in after the check (simulated here by planting it before the write) is not followed."""
    do_sync(hproject)
    repo = git_mirror.Repo.for_project(hproject)
    entry = repo.entry(hostile.c1, PATH)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "optimizer.py").write_text("precious\n")
    real = hostile.repo / "submission"
    real.rename(tmp_path / "moved-away")
    real.symlink_to(outside)  # the directory on the way is now a link
    assert git_worktree.write_to_worktree(repo, str(hostile.repo), entry, PATH) is False
    assert (outside / "optimizer.py").read_text() == "precious\n"
    real.unlink()
    (tmp_path / "moved-away").rename(real)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (hostile.repo / PATH).unlink()
    os.link(victim, hostile.repo / PATH)  # a hard link at the path: replaced, never written through
    assert git_worktree.write_to_worktree(repo, str(hostile.repo), entry, PATH) is True
    assert (
        victim.read_text() == "precious\n" and (hostile.repo / PATH).read_text() == "class Optimizer:  # v1\n"
    )
    assert hostile.ran() == ""


def test_a_work_tree_of_another_repository_listed_by_the_agent_is_left_alone(
    hproject, hostile, bob, tmp_path
):
    """The agent writes .git/worktrees/<name>/gitdir naming someone else's checkout of a branch main."""
    do_sync(hproject)  # the checkpoints, while the repository is still plain
    head = git(hostile.repo, "rev-parse", "main").strip()
    victim = tmp_path / "victim"
    victim.mkdir()
    git(victim, "init", "-q", "-b", "main")
    commit(victim, {PATH: "class Optimizer:  # v3, broken\n"}, "theirs")
    fake = hostile.repo / ".git" / "worktrees" / "fake"
    fake.mkdir(parents=True)
    (fake / "gitdir").write_text(f"{victim}/.git\n")
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "commondir").write_text("../..\n")
    assert str(victim) in git(hostile.repo, "worktree", "list", "--porcelain")  # git lists it
    # Linked work trees are refused outright since red-team N3 (their list is the agent's to write).
    assert do_sync(hproject).error.startswith("foreign_repository: ")
    rollback = _rollback_to(hproject, bob, hostile.c1)
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "failed"
    assert (victim / PATH).read_text() == "class Optimizer:  # v3, broken\n"  # theirs, untouched
    assert git(victim, "status", "--porcelain") == ""
    rollback.refresh_from_db()
    assert "linked work trees" in rollback.detail and git(hostile.repo, "rev-parse", "main").strip() == head


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the repository to another user")
def test_a_repository_owned_by_another_user_is_still_read(hproject, hostile):
    """git refuses a repository of another owner unless told it is safe: smrweb says so for the one
    repository it was bound to, in the upload-pack of the mirror's fetch too."""
    for root, dirs, files in os.walk(hostile.repo):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), 65534, 65534)
    os.lchown(hostile.repo, 65534, 65534)
    report = do_sync(hproject)
    assert report.error == "" and report.synced == 1 and hostile.ran() == ""


def test_a_partial_clone_cannot_make_the_fetch_run_its_promisor_program(tmp_path, alice, monkeypatch):
    """An agent repository that is a partial clone lacks old blobs; upload-pack serving the mirror's fetch
    would fetch them lazily from the promisor remote, running `remote.origin.uploadpack`. smrweb starts
    upload-pack with lazy fetching off whatever the worker's environment says (here: on)."""
    origin, agent, marker = tmp_path / "origin.git", tmp_path / "agent", tmp_path / "LAZY-FETCH-RAN"
    git(tmp_path, "init", "-q", "-b", "main", "--bare", str(origin))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(origin), str(work))
    commit(work, {PATH: "class Optimizer:  # v1\n"}, "v1")
    commit(work, {PATH: "class Optimizer:  # v2\n"}, "v2")
    git(work, "push", "-q", "origin", "main")
    git(origin, "config", "uploadpack.allowFilter", "true")
    git(tmp_path, "clone", "-q", "--filter=blob:none", "--no-local", f"file://{origin}", str(agent))
    evil = evil_program(tmp_path / "uploadpack", marker, "lazy fetch")
    (tmp_path / "uploadpack").write_text(f"#!/bin/sh\necho ran >> '{marker}'\nexec git-upload-pack \"$@\"\n")
    git(agent, "config", "remote.origin.uploadpack", evil)
    real_env = git_cli.git_env
    monkeypatch.setattr(git_cli, "git_env", lambda **extra: {**real_env(**extra), "GIT_NO_LAZY_FETCH": "0"})
    scenario = services.create_scenario(key="opt", name="opt", artifact_path=PATH)
    project = admin_project(
        "partial", scenario=scenario, source="git", git_repo_path=str(agent), git_branch="main", by=alice
    )
    report = do_sync(project)
    assert not marker.exists()
    assert report.error.startswith("git: could not read main")  # the old blob is missing: said, not fetched

    # The same fetch by plain git (lazy fetching on) runs the agent's program: the trap was live.
    plain_mirror = tmp_path / "plain.git"
    git(tmp_path, "init", "-q", "--bare", str(plain_mirror))
    subprocess.run(
        ["git", "-C", str(plain_mirror), "fetch", "-q", str(agent), "+refs/heads/main:refs/heads/main"],
        env={**GIT_ENV, "GIT_NO_LAZY_FETCH": "0"},
        capture_output=True,
        timeout=60,
    )
    assert marker.exists()
