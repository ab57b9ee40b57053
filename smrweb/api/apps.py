from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "smrweb.api"
    label = "api"
