"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered from the apps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")

app = Celery("smrweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
