"""What each source can do, in one table, and the one rule of when an action is refused.

Every page, API view, service and task that asks "may this project roll back / steer / start a run / stop a
run / close a run?" asks `refusal(project, action)` (or `may`, which adds the reviewer role). The order is
fixed: an archived project first (read-only, for every action), then the table (what the source can do at
all), then the action's own conditions (a webhook URL to send to, a repository to branch from, a live or
silent run). A new action or source is a new row in `TABLE`; `tests/tracking/test_capabilities.py` checks
that every (source, action) has one and that every action refuses an archived project.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.utils import timezone

from smrweb.core import numbers
from smrweb.tracking.models import Project, Role, Run, SourceKind


class Action(StrEnum):
    ROLL_BACK = "roll back"
    STEER = "steer"  # a runtime message, a pause or a resume
    LAUNCH = "launch"  # start the next run
    STOP = "stop"
    CLOSE = "close"  # close a silent run as abandoned


@dataclass(frozen=True)
class Can:
    """The source can: what the action does there (shown next to the button)."""

    effect: str


@dataclass(frozen=True)
class Cannot:
    """The source cannot: why, in the words the page shows ("" for the plain sentence)."""

    why: str = ""


_NOT_STEERED = (
    "Git workspace projects cannot be steered: smrweb reads the agent's branch and has no way to talk to the "
    "agent while it runs."
)
_NOT_STOPPED = (
    "Git workspace runs cannot be stopped from smrweb: it reads the agent's branch and has no way to reach "
    "the agent; close a silent run as abandoned instead."
)
_REPORTS_ITS_END = "{source} reports the end of its runs itself: stop the run instead of closing it."

TABLE: dict[tuple[str, Action], Can | Cannot] = {
    (SourceKind.SMR, Action.ROLL_BACK): Can("Managed Research restores the matching checkpoint in place"),
    (SourceKind.GIT, Action.ROLL_BACK): Can("A new commit restores its files on the branch"),
    (SourceKind.PUSH, Action.ROLL_BACK): Can("The project's webhook is told to restore it"),
    (SourceKind.SMR, Action.STEER): Can("Managed Research delivers it to the run's orchestrator"),
    (SourceKind.PUSH, Action.STEER): Can("The project's webhook tells the harness"),
    (SourceKind.GIT, Action.STEER): Cannot(_NOT_STEERED),
    (SourceKind.SMR, Action.LAUNCH): Can(
        "Managed Research starts a new run (trigger_run) with the kickoff as its first runtime message and "
        "the budget as its limit"
    ),
    (SourceKind.PUSH, Action.LAUNCH): Can(
        "The project's harness is sent a signed start webhook naming the new run's id"
    ),
    (SourceKind.GIT, Action.LAUNCH): Can(
        "A new branch is created at the chosen commit in the project's repository, and the project follows "
        "it from then on"
    ),
    (SourceKind.SMR, Action.STOP): Can("Managed Research is asked to stop the run through its SDK"),
    (SourceKind.PUSH, Action.STOP): Can("The project's webhook is sent a signed stop for the run"),
    (SourceKind.GIT, Action.STOP): Cannot(_NOT_STOPPED),
    # SMR reports every end itself (a dead run there is stopped through the SDK instead).
    (SourceKind.SMR, Action.CLOSE): Cannot(_REPORTS_ITS_END),
    (SourceKind.PUSH, Action.CLOSE): Can("The run ends as abandoned, with the reason why"),
    (SourceKind.GIT, Action.CLOSE): Can("The run ends as abandoned, with the reason why"),
}

# Why a push project without a webhook URL cannot do each action that goes through the webhook.
_NO_WEBHOOK = {
    Action.ROLL_BACK: "This project has no webhook URL for its harness: an admin sets the harness webhook "
    "URL in the project settings, so the harness can be told to roll back.",
    Action.STEER: "This project has no webhook URL for its harness: an admin sets the harness webhook "
    "URL in the project settings, so the harness can be sent messages, pauses and resumes.",
    Action.LAUNCH: "This project has no webhook URL for its harness: an admin sets the harness webhook "
    "URL in the project settings, so the harness can be told to start a run.",
    Action.STOP: "This project has no webhook URL for its harness: an admin sets the harness webhook "
    "URL in the project settings, so the harness can be told to stop a run.",
}


def effect(source: str, action: Action) -> str:
    """What `action` does for `source` ("" when the source cannot do it)."""
    cell = TABLE.get((source, action))
    return cell.effect if isinstance(cell, Can) else ""


def refusal(project: Project, action: Action, *, run: Run | None = None, now: datetime | None = None) -> str:
    """Why `action` is refused in `project` ("" when it may go ahead). With `run`, the run's own
    conditions too (stop: not finished; close: not finished and silent for the stall threshold)."""
    if project.archived_at is not None:
        return f"Project {project.slug} is archived: it is read-only until an admin restores it."
    cell = TABLE.get((project.source, action))
    if not isinstance(cell, Can):
        why = cell.why if cell is not None else ""
        source = project.get_source_display()
        return why.format(source=source) if why else f"{source} projects cannot {action} from smrweb."
    if action in _NO_WEBHOOK and project.source == SourceKind.PUSH and not project.rollback_webhook_url:
        return _NO_WEBHOOK[action]
    if action == Action.LAUNCH and project.source == SourceKind.GIT:
        if not (project.git_repo_path and project.git_branch):
            return "This project has no repository path or branch to start a new branch from."
    if run is not None and action in (Action.STOP, Action.CLOSE):
        if run.is_terminal:
            return f"The run is already {run.state}."
        if action == Action.CLOSE:
            return _close_too_soon(run, project, now)
    return ""


def _close_too_soon(run: Run, project: Project, now: datetime | None) -> str:
    silent = (now or timezone.now()) - run.last_progress_at
    if silent >= project.stall_after:
        return ""
    return (
        f"The run sent news {numbers.duration(silent)} ago. A run can be closed as abandoned once it "
        f"has been silent for the project's stall threshold ({numbers.duration(project.stall_after)}), "
        f"that is in {numbers.duration(project.stall_after - silent + timedelta(seconds=1))}."
    )


def may(user: Any, project: Project, action: Action, *, run: Run | None = None, now=None) -> bool:
    """Whether `user` gets the action's buttons: reviewers and admins, where `refusal` says yes."""
    return not refusal(project, action, run=run, now=now) and project.allows(user, Role.REVIEWER)
