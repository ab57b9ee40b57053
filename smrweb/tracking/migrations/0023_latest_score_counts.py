"""A run's `latest_score` reads the rule its `best_score` reads (issue 33, P0-A): the latest submission
that counts in the run's own figures (not invalid, rejected or excluded), no longer the latest of any
status. One UPDATE over every run."""

from django.db import migrations
from django.db.models import OuterRef, Q, Subquery

NEVER_COUNTED = ("invalid", "rejected")  # as models.submission.NEVER_COUNTED when this was written


def latest_that_counts(apps, schema_editor):
    Run = apps.get_model("tracking", "Run")
    Submission = apps.get_model("tracking", "Submission")
    latest = (
        Submission.objects.filter(run=OuterRef("pk"), excluded_at__isnull=True)
        .exclude(status__in=NEVER_COUNTED)
        .order_by("-ts", "-id")
        .values("score")[:1]
    )
    Run.objects.filter(Q(score_count__gt=0) | Q(latest_score__isnull=False)).update(
        latest_score=Subquery(latest)
    )


class Migration(migrations.Migration):
    dependencies = [("tracking", "0022_alert_digests")]

    operations = [migrations.RunPython(latest_that_counts, migrations.RunPython.noop, elidable=True)]
