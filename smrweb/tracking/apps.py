from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "smrweb.tracking"
    label = "tracking"
