"""What the domain announces for the layers above it to act on. The domain never imports Celery: the
`sources` app connects the receivers that queue work (`sources/apps.py`)."""

from django.dispatch import Signal

# A run of a project that verifies every new score recorded new scores; sent after the commit, with
# `run_id`. The receiver queues the run's new candidates for verification.
new_scores_to_verify = Signal()
