"""smrweb. The Celery app is loaded when Django starts (SmrwebConfig.ready, apps.py), not on import, so
that `smrweb.client` — imported by harnesses that have no Django — stays a light import."""


def __getattr__(name: str):
    if name == "celery_app":  # `celery -A smrweb` looks for it here
        from smrweb.celery import app

        return app
    raise AttributeError(name)


__all__ = ["celery_app"]
