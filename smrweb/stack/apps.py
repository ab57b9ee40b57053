from django.apps import AppConfig


class StackConfig(AppConfig):
    """Running smrweb on one machine: the process supervisor (`runstack`) and the demo harness."""

    name = "smrweb.stack"
    label = "stack"
