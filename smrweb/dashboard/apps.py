from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "smrweb.dashboard"
    label = "dashboard"
