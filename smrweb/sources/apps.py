from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "smrweb.sources"
    label = "sources"
