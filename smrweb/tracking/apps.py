from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "smrweb.tracking"
    label = "tracking"

    def ready(self) -> None:
        # Make smrweb's Celery app the current one before any task is queued from a request.
        import smrweb.celery  # noqa: F401
        import smrweb.core.checks  # noqa: F401  (registers the deployment checks)
