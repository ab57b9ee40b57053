from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "smrweb.tracking"
    label = "tracking"

    def ready(self) -> None:
        # Make smrweb's Celery app the current one before any task is queued from a request.
        import smrweb.celery  # noqa: F401
        import smrweb.core.checks  # noqa: F401  (registers the deployment checks)
        from django.contrib.auth.signals import user_logged_in

        from smrweb.core.middleware import start_session_clock

        user_logged_in.connect(start_session_clock, dispatch_uid="smrweb-session-clock")
