from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "smrweb.tracking"
    label = "tracking"

    def ready(self) -> None:
        import smrweb.core.checks  # noqa: F401  (registers the deployment checks)
