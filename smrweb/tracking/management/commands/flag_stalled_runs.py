from django.core.management.base import BaseCommand

from smrweb.tracking import services


class Command(BaseCommand):
    help = "Flag live runs with no progress for their project's stall_after (what the beat task does)."

    def handle(self, *args, **options):
        flagged = services.flag_stalled_runs()
        for run in flagged:
            self.stdout.write(f"stalled: {run}")
        self.stdout.write(f"{len(flagged)} run(s) flagged")
