"""What the domain announces for the layers above it to act on. The domain never imports Celery: the
`sources` app connects the receivers that queue work (`sources/apps.py`)."""

from django.dispatch import Signal

# A run of a project that verifies every new score recorded new scores, or its waiting scores got their
# artifact; sent after the commit, with `run_id`. The receiver queues the run's new candidates for
# verification.
new_scores_to_verify = Signal()

# A project's auto-verify setting was switched on; sent after the commit, with `project_id`. The
# receiver queues the catch-up on the candidates that were already waiting, in rate-limited chunks.
auto_verify_switched_on = Signal()

# Something an alert rule may be watching changed; sent after the commit with `kind` ("run",
# "submission" or "source") and `object_id` (the run, the submission, the project). The receiver queues
# an evaluation (services/alerts/evaluation.py, evaluate_*), coalescing a burst into one.
alerts_due = Signal()

# A blob summary (`BlobSummary`) was claimed and needs a worker; sent after the commit with
# `summary_id`. The receiver queues `smrweb.tasks.summarize_blob`.
summary_wanted = Signal()


def announce_scores_to_verify(run_id: int) -> None:
    """Send `new_scores_to_verify` for the run once the current transaction commits: new scores of a project
    that verifies every score, or waiting scores whose artifact just arrived."""
    from django.db import transaction

    transaction.on_commit(lambda: new_scores_to_verify.send(sender="run", run_id=run_id))


def announce_alerts_due(kind: str, object_id: int) -> None:
    """Send `alerts_due` once the current transaction commits (at once outside one)."""
    from django.db import transaction

    transaction.on_commit(lambda: alerts_due.send(sender=kind, kind=kind, object_id=object_id))
