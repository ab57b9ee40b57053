"""Put the agent turns of existing SMR runs on the side their source states (issue 34).

Older pollers booked every turn whose usage entry named only an actor id as driver inference, though the
run's per-actor usage typed that actor's role. This moves each turn to the side of the role the source
stated (kept on the run: `source_spend.roles`, the actors it lists), marks an actor the source billed
without any role as "role unknown", and has the next poll sync each run again (usage re-read and joined by
actor id, reconciliation recomputed). Safe to run twice: a turn already on its side is not touched.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from smrweb.sources.smr_usage import UNKNOWN, side_of
from smrweb.tracking import services
from smrweb.tracking.models import Project, Run, SourceKind


def stored_sides(run: Run) -> dict[str, str]:
    """Actor id -> side, from what the run keeps of its source's typed roles."""
    sides = {actor: side_of(role) for actor, role in run.actor_roles.items()}
    for actor in (run.source_spend or {}).get("roles_unknown") or []:
        sides.setdefault(str(actor), UNKNOWN)
    return sides


class Command(BaseCommand):
    help = "Re-attribute SMR runs' agent turns to driver/child by the roles their source states."

    def add_arguments(self, parser):
        parser.add_argument("--project", help="only this project (slug); default: every SMR project")
        parser.add_argument(
            "--no-resync",
            action="store_true",
            help="do not have the next poll sync the runs again (by default each run is re-read whole)",
        )

    def handle(self, *args, project=None, no_resync=False, **options):
        runs = Run.objects.filter(project__source=SourceKind.SMR).order_by("pk")
        if project:
            if not Project.objects.filter(slug=project, source=SourceKind.SMR).exists():
                raise CommandError(f"no SMR project {project!r}")
            runs = runs.filter(project__slug=project)
        seen = moved = 0
        for run in runs.iterator(chunk_size=200):
            seen += 1
            moved += services.attribute_turns(run, stored_sides(run))
            if not no_resync:
                # The next poll reads the run whole again: usage joined to the roles by actor id.
                cursor = {k: v for k, v in (run.source_cursor or {}).items() if k not in RESYNC_KEYS}
                spend = {k: v for k, v in (run.source_spend or {}).items() if k != "sides_fp"}
                Run.objects.filter(pk=run.pk).update(
                    source_updated_at=None, source_cursor=cursor, source_spend=spend
                )
        self.stdout.write(
            f"{seen} SMR run(s) looked at, {moved} turn(s) moved to the side their source states"
        )


# Cursor keys whose absence makes the next poll re-read usage and re-attribute the run's turns.
RESYNC_KEYS = ("entries_at", "entries_fp", "usage_ts", "roles_asked")
