import sys

from django.core.management.base import BaseCommand, CommandError

from smrweb.sources import jsonl
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.events import MAX_EVENTS
from smrweb.tracking.models import Project


class Command(BaseCommand):
    help = (
        "Import a JSONL event log (plain or gzip) into one run: streamed in batches through the ingest "
        "contract, idempotent per line, resumable after an interruption (docs/integrations.md#jsonl-import)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument(
            "--run", required=True, metavar="RUN", help="the run's external id (created if new)"
        )
        parser.add_argument(
            "--format",
            default="auto",
            choices=("auto", *jsonl.FORMATS),
            help="default: told from the file's first lines",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress bar")
        parser.add_argument(
            "--restart",
            action="store_true",
            help="ignore the checkpoint of an unfinished import of this file and read it from the start",
        )
        parser.add_argument(
            "--max-lines",
            type=int,
            metavar="N",
            help="stop after N lines; the next run of the command goes on from there",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=MAX_EVENTS,
            metavar="N",
            help=f"events per write (1 to {MAX_EVENTS}, the default)",
        )

    def handle(self, *args, file, project, run, format, quiet, restart, max_lines, batch_size, **options):
        target = Project.objects.filter(slug=project).select_related("scenario").first()
        if target is None:
            raise CommandError(f"No project {project!r}.")
        try:
            result = jsonl.import_file(
                file,
                target,
                run,
                fmt=format,
                progress=None if quiet else sys.stderr,
                restart=restart,
                max_lines=max_lines,
                batch_size=batch_size,
            )
        except TrackingError as exc:
            raise CommandError(exc.message) from None
        if options["verbosity"] > 0:
            self.stdout.write(jsonl.format_summary(result))
        if result.interrupted:
            raise CommandError("interrupted", returncode=130)
        if result.error:
            raise CommandError(result.error)
