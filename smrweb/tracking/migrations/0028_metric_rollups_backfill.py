from django.db import migrations, transaction
from django.db.models import Exists, OuterRef


def build_rollups(apps, schema_editor):
    """The metric rollups of the runs that already have points, a run to a transaction (each under the
    run's row lock, its points read 50,000 at a time): a long backfill commits as it goes, and one cut
    short is finished by running it again (a run's rollups are deleted before they are computed). Only
    when there are such runs does this reach for the current code (the ingest write path's own
    aggregation): a fresh database stays on the historical models."""
    point = apps.get_model("tracking", "MetricPoint")
    runs = apps.get_model("tracking", "Run").objects.filter(Exists(point.objects.filter(run=OuterRef("pk"))))
    run_ids = list(runs.order_by("pk").values_list("pk", flat=True))
    if not run_ids:
        return
    from smrweb.tracking.models import Run
    from smrweb.tracking.services import metric_rollups

    for run_id in run_ids:
        with transaction.atomic():
            list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk"))
            metric_rollups.rebuild(run_id)


class Migration(migrations.Migration):
    atomic = False  # a transaction per run (see build_rollups)

    dependencies = [
        ("tracking", "0027_metric_rollups"),
    ]

    operations = [
        migrations.RunPython(build_rollups, migrations.RunPython.noop),
    ]
