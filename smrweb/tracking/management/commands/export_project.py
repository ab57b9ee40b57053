from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import backup
from smrweb.tracking.models import Project


class Command(BaseCommand):
    help = (
        "Write a project to a self-contained archive: every row, the artifact bytes and a manifest of "
        "sha256 digests (docs/backup.md). An existing file is never overwritten."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument(
            "-o",
            "--output",
            help="the archive to write (default: <slug>-<UTC time>.smrweb.zip in the current directory)",
        )

    def handle(self, *args, slug, output, **options):
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"No project {slug!r}.")
        path = Path(output or backup.default_archive_name(slug))
        try:
            manifest = backup.export_project(project, path)
        except backup.BackupError as exc:
            raise CommandError(exc.message) from None
        counts = ", ".join(f"{n} {table}" for table, n in manifest["counts"].items() if n)
        self.stdout.write(f"exported {slug} to {path}: {counts}")
