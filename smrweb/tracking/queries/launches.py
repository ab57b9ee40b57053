"""What the "Start the next run" form is prefilled with (the read side of `services.launches`): the
scenario, the model profile, budget and git commit of the run it comes from (else of the project's
latest run), and the carry-forward block for the kickoff message."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from smrweb.tracking.models import Project, Run, SourceKind
from smrweb.tracking.queries.knowledge import N_DEFAULT, carry_forward, render_carry_forward


@dataclass(frozen=True)
class Defaults:
    scenario: Any
    from_run: Run | None
    template: Run | None  # the run the profile, budget and commit come from (from_run, else the latest)
    model_profile: str
    budget_usd: Decimal | None
    budget_tokens: int | None
    git_commit: str
    carry_forward: str  # the rendered block, editable in the form
    n: int


def launch_defaults(project: Project, from_run: Run | None = None, *, n: int | None = None) -> Defaults:
    """The prefill: the model profile is the run's requested profile, else what it ran on; the commit
    (git projects) is where the run's branch was last seen; `n` failed approaches in the block."""
    template = from_run or Run.objects.filter(project=project).order_by("-started_at", "-id").first()
    n = N_DEFAULT if n is None else n
    return Defaults(
        scenario=project.scenario,
        from_run=from_run,
        template=template,
        model_profile=(template.requested_profile or template.actual_profile) if template else "",
        budget_usd=template.budget_usd if template else None,
        budget_tokens=template.budget_tokens if template else None,
        git_commit=(template.git_commit if template else "") if project.source == SourceKind.GIT else "",
        carry_forward=render_carry_forward(carry_forward(project, n)),
        n=n,
    )
