"""Starting the next run — part of the one write path (with `services`).

A reviewer asks for the next run of a project (from the project, a run, or the knowledge page) with a
kickoff made of the carry-forward block and their own text, a model profile and a budget prefilled
from the run it comes from (`queries.launch_defaults`, a read). A task dispatches it through the
project's source (SMR: `trigger_run`; push: a signed `smrweb.start` webhook to the harness; git: a new
branch) and records each attempt: requested → dispatched → accepted (the source took it) → confirmed
(the new run appeared, linked to the run it came from) | failed, all audited.

The request carries an idempotency key (a UUID rendered into the form, or the API's Idempotency-Key
header): a double click, a resent form or a retried API call returns the launch already made, and the
key goes on to the source (SMR's `idempotency_key`, the webhook's Idempotency-Key header), so exactly
one run is started there.

Whichever way a run first reaches smrweb (ingest, a poll, a git sync), `services.runs._locked_run`
creates it and calls `link_new_run`: a launch waiting for that run id becomes confirmed and the run's
`parent` is the run the launch came from. When the source's answer names a run smrweb has already
seen (a poll came first), `record_accepted` links it instead.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from smrweb.tracking.errors import InvalidInput, KeyReused, LaunchRefused, NotAllowed
from smrweb.tracking.models import (
    OPEN_DISPATCH,
    AuditVerb,
    DispatchStatus,
    Project,
    Role,
    Run,
    RunLaunch,
    SourceKind,
)
from smrweb.tracking.services import capabilities, dispatched
from smrweb.tracking.services.audit import record_audit
from smrweb.tracking.services.capabilities import Action

D = DispatchStatus

# An idempotency key: what the form renders (a UUID) or an API client sends; it also goes to SMR
# (`idempotency_key`, at most 128 characters there) and in the webhook's Idempotency-Key header.
KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,99}\Z")
KICKOFF_MAX = 50_000  # characters; a runtime message holds 100,000
PROFILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}\Z")
COMMIT_RE = re.compile(r"^[0-9a-fA-F]{4,64}\Z")
BUDGET_USD_MAX = Decimal("1000000")  # a million dollars: far above any run, far inside the column
BUDGET_TOKENS_MAX = 10**12
NEXT_SUFFIX_RE = re.compile(r"-next-\d+\Z")


def compose_kickoff(carry_forward: str, text: str) -> str:
    """The kickoff message: the (edited) carry-forward block, then the person's own text."""
    return "\n\n".join(part for part in ((carry_forward or "").strip(), (text or "").strip()) if part)


def new_key() -> str:
    """A fresh idempotency key (the form renders one per page view)."""
    return str(uuid.uuid4())


# --- checking a request ------------------------------------------------------------------------------


def check_budget_usd(value: Any) -> Decimal | None:
    """A USD budget: positive, finite, at most BUDGET_USD_MAX, to the micro-dollar; None/"" is none."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise InvalidInput("budget_usd", "A budget in USD, e.g. 2.50.")
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise InvalidInput("budget_usd", "A budget in USD, e.g. 2.50.") from None
    if not amount.is_finite() or amount <= 0:
        raise InvalidInput("budget_usd", "A budget must be a positive, finite amount of USD.")
    if amount > BUDGET_USD_MAX:
        raise InvalidInput("budget_usd", f"At most {BUDGET_USD_MAX:,} USD.")
    if amount != amount.quantize(Decimal("0.000001")):
        raise InvalidInput("budget_usd", "At most six decimal places (a micro-dollar).")
    return amount.quantize(Decimal("0.000001"))


def check_budget_tokens(value: Any) -> int | None:
    """A token budget: a positive whole number up to BUDGET_TOKENS_MAX; None/"" is none."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or (
        isinstance(value, float) and not (math.isfinite(value) and value.is_integer())
    ):
        raise InvalidInput("budget_tokens", "A whole number of tokens, e.g. 1500000.")
    try:
        tokens = int(str(value).strip()) if not isinstance(value, (int, float)) else int(value)
    except ValueError:
        raise InvalidInput("budget_tokens", "A whole number of tokens, e.g. 1500000.") from None
    if tokens <= 0:
        raise InvalidInput("budget_tokens", "A token budget must be positive.")
    if tokens > BUDGET_TOKENS_MAX:
        raise InvalidInput("budget_tokens", f"At most {BUDGET_TOKENS_MAX:,} tokens.")
    return tokens


def check_key(key: Any) -> str:
    key = str(key or "").strip()
    if not KEY_RE.match(key):
        raise InvalidInput(
            "idempotency_key",
            "An idempotency key is 8 to 100 letters, digits and . _ : - (a UUID is a good one).",
        )
    return key


def _check_request(
    project: Project,
    *,
    from_run: Run | None,
    kickoff: str,
    model_profile: str,
    git_commit: str,
) -> tuple[str, str, str]:
    if from_run is not None and from_run.project_id != project.pk:
        raise InvalidInput("from_run", f"Run {from_run.external_id} is not a run of {project.slug}.")
    kickoff = (kickoff or "").strip()
    if not kickoff:
        raise InvalidInput(
            "kickoff", "The kickoff message is empty: keep the carry-forward block or write one."
        )
    if len(kickoff) > KICKOFF_MAX:
        raise InvalidInput("kickoff", f"The kickoff is {len(kickoff):,} characters; at most {KICKOFF_MAX:,}.")
    if "\x00" in kickoff:
        raise InvalidInput("kickoff", "The kickoff holds a NUL character.")
    model_profile = (model_profile or "").strip()
    if model_profile and not PROFILE_RE.match(model_profile):
        raise InvalidInput(
            "model_profile", "A model profile id: letters, digits and . _ : / @ + -, at most 200 characters."
        )
    git_commit = (git_commit or "").strip().lower()
    if git_commit and project.source != SourceKind.GIT:
        raise InvalidInput("git_commit", "A commit is for projects whose source is git.")
    if git_commit and not COMMIT_RE.match(git_commit):
        raise InvalidInput("git_commit", "A commit hash: 4 to 64 hexadecimal characters.")
    return kickoff, model_profile, git_commit


def _same_request(launch: RunLaunch, project: Project, values: dict[str, Any]) -> bool:
    return launch.project_id == project.pk and all(getattr(launch, k) == v for k, v in values.items())


def _replay(launch: RunLaunch, project: Project, values: dict[str, Any]) -> tuple[RunLaunch, bool]:
    if not _same_request(launch, project, values):
        raise KeyReused(
            "This idempotency key was already used for a different request; send a new key to start "
            "another run."
        )
    return launch, False


def _next_run_id(project: Project, from_run: Run | None) -> str:
    """The id of a push project's new run, chosen by smrweb and sent in the start webhook:
    `<from run>-next-<n>` (the from run's own `-next-<n>` suffix dropped, so lineages stay readable),
    else `run-<8 hex>`; never one the project has or another launch is waiting for."""
    taken = set(
        RunLaunch.objects.filter(project=project)
        .exclude(external_run_id="")
        .values_list("external_run_id", flat=True)
    )
    if from_run is None:
        while True:
            candidate = f"run-{uuid.uuid4().hex[:8]}"
            if (
                candidate not in taken
                and not Run.objects.filter(project=project, external_id=candidate).exists()
            ):
                return candidate
    stem = NEXT_SUFFIX_RE.sub("", from_run.external_id)[:180]
    n = 1
    while True:
        candidate = f"{stem}-next-{n}"
        if candidate not in taken and not Run.objects.filter(project=project, external_id=candidate).exists():
            return candidate
        n += 1


def request_launch(
    project: Project,
    *,
    by: Any,
    from_run: Run | None = None,
    kickoff: str,
    model_profile: str = "",
    budget_usd: Any = None,
    budget_tokens: Any = None,
    git_commit: str = "",
    idempotency_key: str,
) -> tuple[RunLaunch, bool]:
    """Record a request to start the next run (the caller dispatches it on commit when created).
    Returns (launch, created): the same key with the same request gives the launch already made."""
    if getattr(by, "pk", None) is None or not project.allows(by, Role.REVIEWER):
        raise NotAllowed(f"Starting runs needs the reviewer role in {project.slug} (a person, not a token).")
    key = check_key(idempotency_key)
    kickoff, model_profile, git_commit = _check_request(
        project, from_run=from_run, kickoff=kickoff, model_profile=model_profile, git_commit=git_commit
    )
    values = {
        "from_run_id": from_run.pk if from_run else None,
        "kickoff": kickoff,
        "model_profile": model_profile,
        "budget_usd": check_budget_usd(budget_usd),
        "budget_tokens": check_budget_tokens(budget_tokens),
        "git_commit": git_commit,
    }
    earlier = RunLaunch.objects.filter(idempotency_key=key).first()
    if earlier is not None:  # a double click or a retry: before the refusal checks, so it always replays
        return _replay(earlier, project, values)
    if refusal := capabilities.refusal(project, Action.LAUNCH):
        raise LaunchRefused(refusal)
    try:
        with transaction.atomic():
            # One launch at a time per project, so two launches never choose the same new run id. NO KEY
            # UPDATE: ingest's rows that point at the project (their FK checks take KEY SHARE at commit) are
            # not blocked by it, so a launch from a run being written cannot deadlock with its ingest.
            Project.objects.select_for_update(no_key=True).filter(pk=project.pk).first()
            earlier = RunLaunch.objects.filter(idempotency_key=key).first()
            if earlier is not None:
                return _replay(earlier, project, values)
            launch = RunLaunch.objects.create(
                project=project,
                requested_by=by,
                idempotency_key=key,
                external_run_id=_next_run_id(project, from_run) if project.source == SourceKind.PUSH else "",
                **values,
            )
            record_audit(
                by,
                AuditVerb.LAUNCH_REQUESTED,
                launch,
                project=project,
                from_run=from_run.external_id if from_run else None,
                model_profile=model_profile,
                budget_usd=str(values["budget_usd"]) if values["budget_usd"] is not None else None,
                budget_tokens=values["budget_tokens"],
                git_commit=git_commit,
                kickoff=kickoff[:500],
            )
    except IntegrityError:
        # A concurrent request with the same key won the race between our check and the insert.
        return _replay(RunLaunch.objects.get(idempotency_key=key), project, values)
    return launch, True


# --- what the source's answer records (the attempts: services/dispatched.py) ------------------------------


def record_accepted(
    launch_id: int, *, external_run_id: str, detail: str, follow_branch: str = ""
) -> RunLaunch | None:
    """The source took the request and names the new run: accepted, and confirmed at once when smrweb
    has already seen that run (a poll can come before the answer is recorded). `follow_branch`: a git
    launch's new branch, which the project follows from now on."""
    with transaction.atomic():
        launch = dispatched.locked(RunLaunch, launch_id)
        if launch.status == D.CONFIRMED and launch.run is not None:
            # The run reported before the answer was recorded (a harness that starts pushing at once):
            # keep the answer in the log, nothing else changes.
            dispatched.append(launch, detail)
            launch.save(update_fields=["detail", "updated"])
            return launch
        if launch.status not in OPEN_DISPATCH:
            return None
        if follow_branch:
            _follow_branch(launch, follow_branch)
        launch.external_run_id = external_run_id[:200]
        launch.status = D.ACCEPTED
        dispatched.append(launch, detail)
        launch.save()
        record_audit(
            None,
            AuditVerb.LAUNCH_ACCEPTED,
            launch,
            project=launch.project,
            run=launch.external_run_id,
            detail=dispatched.printable(detail)[:500],
        )
        run = (
            Run.objects.select_for_update(of=("self",))  # PostgreSQL: not the outer join's nullable side
            .filter(project=launch.project, external_id=launch.external_run_id, launch__isnull=True)
            .first()
        )
        if run is not None:
            _link(launch, run)
    return launch


def expire_unseen(now: datetime | None = None) -> list[RunLaunch]:
    """Accepted launches whose run has not reported within SMRWEB_LAUNCH_APPEAR_SECONDS of the source's
    answer end failed, saying so — a person waiting on "the run shows here as soon as it reports" is told
    it did not. A run that reports later is still linked (`link_new_run` does not look at the status)."""
    now = now or timezone.now()
    waited = settings.SMRWEB_LAUNCH_APPEAR_SECONDS
    # `updated` is when the answer was recorded: nothing saves an accepted launch until it ends.
    due = RunLaunch.objects.filter(
        status=D.ACCEPTED, run__isnull=True, updated__lt=now - timedelta(seconds=waited)
    ).values_list("pk", flat=True)
    expired = []
    for launch_id in list(due[:200]):
        with transaction.atomic():
            launch = dispatched.locked(RunLaunch, launch_id)
            if launch.status != D.ACCEPTED or launch.run_id is not None:
                continue  # confirmed meanwhile
            launch.status = D.FAILED
            launch.finished_at = now
            dispatched.append(
                launch,
                f"no run {launch.external_run_id} reported within {waited // 60} min of the source's answer; "
                "if it reports later it is linked here",
                now,
            )
            launch.save()
            record_audit(
                None,
                AuditVerb.LAUNCH_UNSEEN,
                launch,
                project=launch.project,
                run=launch.external_run_id,
                waited_seconds=waited,
            )
        expired.append(launch)
    return expired


def _follow_branch(launch: RunLaunch, branch: str) -> Project:
    """A git launch made a new branch: the project follows it from now on (its sync reads that branch),
    audited as a change of the project's source binding."""
    project = Project.objects.select_for_update(no_key=True).get(pk=launch.project_id)  # (as request_launch)
    old = project.git_branch
    project.git_branch = branch
    project.save(update_fields=["git_branch", "updated"])
    record_audit(
        None,
        AuditVerb.PROJECT_BRANCH_FOLLOWED,
        project,
        project=project,
        branch=branch,
        previous=old,
        launch=launch.pk,
    )
    return project


def link_new_run(run: Run) -> RunLaunch | None:
    """Called by the write path when it creates a run (inside its transaction, the run locked): a launch
    waiting for that run id is confirmed and the run's parent is the run the launch came from."""
    launch = (
        RunLaunch.objects.select_for_update(of=("self",))
        .filter(project_id=run.project_id, external_run_id=run.external_id, run__isnull=True)
        .order_by("created", "id")
        .first()
    )
    if launch is None:
        return None
    _link(launch, run)
    return launch


def _link(launch: RunLaunch, run: Run) -> None:
    now = timezone.now()
    launch.run = run
    launch.status = D.CONFIRMED
    launch.finished_at = now
    dispatched.append(launch, f"run {run.external_id} appeared", now)
    launch.save()
    # The run's lineage, and what was asked for where the source has not said otherwise (yet).
    changed = []
    if run.parent_id is None and launch.from_run_id and launch.from_run_id != run.pk:
        run.parent_id = launch.from_run_id
        changed.append("parent")
    for mine, theirs in (
        ("budget_usd", "budget_usd"),
        ("budget_tokens", "budget_tokens"),
        ("model_profile", "requested_profile"),
    ):
        if getattr(launch, mine) not in (None, "") and getattr(run, theirs) in (None, ""):
            setattr(run, theirs, getattr(launch, mine))
            changed.append(theirs)
    if changed:
        run.save(update_fields=[*changed, "updated"])
    record_audit(
        None,
        AuditVerb.LAUNCH_CONFIRMED,
        launch,
        project=launch.project,
        run=run.external_id,
        parent=launch.from_run.external_id if launch.from_run_id else None,
    )
