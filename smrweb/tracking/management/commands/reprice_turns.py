"""Price the unpriced agent turns of existing runs with the price table as it is now (issue 37).

A turn with tokens and no stated cost whose model had no price when it arrived is stored as unpriced (cost
0, counted on its run). Once a price is added (the admin's Model prices, or SMRWEB_MODEL_PRICES), this
prices those turns by the price valid at each turn's time; the runs' spend, kept aggregates, days of spend
and project figures follow. Turns whose model still has no price stay unpriced. Safe to run twice.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import services
from smrweb.tracking.models import Project, Run


class Command(BaseCommand):
    help = "Price unpriced agent turns with the current price table."

    def add_arguments(self, parser):
        parser.add_argument("--project", help="only this project (slug); default: every project")

    def handle(self, *args, project=None, **options):
        runs = Run.objects.filter(unpriced_turns__gt=0).order_by("pk")
        if project:
            if not Project.objects.filter(slug=project).exists():
                raise CommandError(f"no project {project!r}")
            runs = runs.filter(project__slug=project)
        table = services.current_prices()
        seen = priced = 0
        for run in runs.iterator(chunk_size=200):
            seen += 1
            priced += services.reprice_turns(run, table)
        left = sum(Run.objects.filter(pk__in=runs.values("pk")).values_list("unpriced_turns", flat=True))
        self.stdout.write(
            f"{seen} run(s) with unpriced turns, {priced} turn(s) priced, {left} still unpriced"
        )
