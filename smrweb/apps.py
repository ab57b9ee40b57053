from django.apps import AppConfig


class SmrwebConfig(AppConfig):
    """smrweb itself as an app, above `sources/` and `outbound/`: Celery's autodiscovery finds the one
    tasks module (`smrweb/tasks.py`) here, and the tracking signals are connected to the tasks here
    rather than from inside a package the tasks sit above."""

    name = "smrweb"
    label = "smrweb"

    def ready(self) -> None:
        # Make smrweb's Celery app the current one before any task is queued from a request.
        import smrweb.celery  # noqa: F401
        from smrweb import tasks

        tasks.connect_receivers()
