from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "smrweb.sources"
    label = "sources"

    def ready(self) -> None:
        # Make smrweb's Celery app the current one before any task is queued from a request.
        import smrweb.celery  # noqa: F401
        from smrweb.sources import tasks
        from smrweb.tracking import signals

        signals.new_scores_to_verify.connect(tasks.verify_new_scores, dispatch_uid="smrweb-auto-verify")
        signals.auto_verify_switched_on.connect(
            tasks.catch_up_on_switch, dispatch_uid="smrweb-auto-verify-catch-up"
        )
        signals.alerts_due.connect(tasks.queue_alert_evaluation, dispatch_uid="smrweb-alerts-due")
        signals.summary_wanted.connect(tasks.queue_summary, dispatch_uid="smrweb-summary-wanted")
