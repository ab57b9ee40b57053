"""An upgrade from an older schema with data in it: every migration applies, and the derived rows the
current code keeps (the projects' figures) are computed once the whole schema is in place."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from smrweb.tracking.models import ProjectFigures, Run, RunModelSpend


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_from_before_the_figures_applies_and_computes_them():
    before = [("tracking", "0026_turn_role_unknown")]
    call_command("migrate", "tracking", before[0][1], verbosity=0)
    old = MigrationExecutor(connection).loader.project_state(before).apps
    Scenario, Project = old.get_model("tracking", "Scenario"), old.get_model("tracking", "Project")
    OldRun, OldTurn = old.get_model("tracking", "Run"), old.get_model("tracking", "AgentTurn")
    project = Project.objects.create(slug="p", name="p", scenario=Scenario.objects.create(key="s", name="s"))
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    run = OldRun.objects.create(project=project, external_id="r", cost_usd=Decimal("0.5"), turn_count=2)
    OldTurn.objects.create(run=run, event_id="a", turn=0, model="gpt-4o", tokens_in=10, cost_usd="0.5", ts=at)
    OldTurn.objects.create(run=run, event_id="b", turn=1, model="house", tokens_in=10, cost_usd="0", ts=at)
    call_command("migrate", verbosity=0)  # every migration since, then the post-migrate backfill
    figures = ProjectFigures.objects.get(project_id=project.pk)
    assert (figures.runs, figures.spend_turns_usd) == (1, Decimal("0.5"))
    assert sorted(
        RunModelSpend.objects.filter(run_id=run.pk).values_list("model", "cost_usd", "unpriced")
    ) == [
        ("gpt-4o", Decimal("0.5"), 0),
        ("house", Decimal(0), 1),
    ]
    assert Run.objects.get(pk=run.pk).unpriced_turns == 1
