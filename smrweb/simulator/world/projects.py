"""Projects: a project as the wire shows it, and the listing of its runs (newest first, keyset cursor)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso


class ProjectsMixin:
    """`project_wire` and `list_runs` (call under `World.lock`)."""

    def project_wire(self, project_id: str) -> dict[str, Any]:
        runs = [r for r in self.runs_by_project[project_id] if r.exists]
        active = [r for r in runs if not r.terminal]
        created = iso(self.start_time)
        return {
            "project_id": project_id,
            "project_alias": project_id,
            "org_id": self.org_id,
            "name": f"Simulated project {project_id}",
            "timezone": "UTC",
            "schedule": {},
            "budgets": {},
            "key_policy": {},
            "integrations": {},
            "onboarding_state": {},
            "research": {},
            "synth_ai": {},
            "policy": {},
            "trial_matrix": {},
            "execution": {},
            "created_at": created,
            "updated_at": created,
            "archived": False,
            "active_run_id": active[-1].run_id if active else None,
            "latest_run_id": runs[-1].run_id if runs else None,
        }

    def list_runs(
        self,
        project_id: str,
        *,
        states: set[str] | None = None,
        active_only: bool = False,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int = 50,
    ) -> list[SimRun]:
        """Newest first (created_at, then run_id, descending); `after` is a keyset cursor."""
        runs = [r for r in self.runs_by_project[project_id] if r.exists]
        if states:
            runs = [r for r in runs if r.state in states]
        if active_only:
            runs = [r for r in runs if not r.terminal]
        if created_after:
            runs = [r for r in runs if r.created_at >= created_after]
        if created_before:
            runs = [r for r in runs if r.created_at <= created_before]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        if after:
            runs = [r for r in runs if (r.created_at, r.run_id) < after]
        return runs[:limit]
