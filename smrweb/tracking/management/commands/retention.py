import json

from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import services
from smrweb.tracking.models import Project


class Command(BaseCommand):
    help = (
        "Apply every project's retention policy (what beat's apply_retention does), or with --dry-run "
        "list exactly what it would remove."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Remove nothing; say what would go.")
        parser.add_argument("--project", metavar="SLUG", help="Only this project.")
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="One JSON object per project."
        )

    def handle(self, *args, dry_run=False, project=None, as_json=False, **options):
        if project:
            found = Project.objects.filter(slug=project).first()
            if found is None:
                raise CommandError(f"No project {project!r}.")
            reports = [services.apply_retention(found, dry_run=dry_run)]
        else:
            reports = services.apply_all_retention(dry_run=dry_run)
        for report in reports:
            if as_json:
                self.stdout.write(_json(report))
                continue
            verb = "would remove" if dry_run else "removed"
            self.stdout.write(
                f"{report.project}: {verb} {report.points_removed} metric point(s) from "
                f"{len(report.series)} series, and {len(report.runs_deleted)} archived run(s) "
                f"({report.deleted.turns} turns, {report.deleted.metric_points} metric points, "
                f"{report.deleted.artifacts} artifacts, {report.deleted.bytes_freed} bytes freed)"
            )
            for cut in report.series:
                self.stdout.write(f"  {cut.run} {cut.key}: {cut.points} -> {cut.kept} points")
            for run in report.runs_deleted:
                self.stdout.write(f"  delete archived run {run}")


def _json(report) -> str:
    return json.dumps(
        {
            **report.as_dict(),
            "series": [vars(s) for s in report.series],
            "runs": report.runs_deleted,
        },
        sort_keys=True,
    )
