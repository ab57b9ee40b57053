from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "smrweb.dashboard"
    label = "dashboard"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from smrweb.core.middleware import start_session_clock

        user_logged_in.connect(start_session_clock, dispatch_uid="smrweb-session-clock")
