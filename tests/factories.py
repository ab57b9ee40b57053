"""Rows for tests. Multi-step states are built by calling services, so tests never hold impossible rows."""

import json

import factory
from django.contrib.auth import get_user_model


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw-for-tests-only")


def admin_project(*args, by, **kwargs):
    """A project the operator created with `by` as its admin — how an ordinary user comes to administer
    one, since creating projects is for staff and users given the permission (red-team finding 1)."""
    from smrweb.tracking import services
    from smrweb.tracking.models import Role

    project = services.create_project(*args, **kwargs)
    services.add_member(project, by, role=Role.ADMIN)
    return project


def grant(user, *codenames: str) -> None:
    """Give `user` permissions of the tracking app, e.g. grant(carol, "add_project", "bind_source")."""
    from django.contrib.auth.models import Permission

    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="tracking", codename__in=codenames)
    )
    for cache in ("_perm_cache", "_user_perm_cache"):
        user.__dict__.pop(cache, None)


def push(project, run_id, *events):
    """Ingest events exactly as the REST endpoint does: JSON bytes → parse_events → services."""
    from smrweb.tracking import services
    from smrweb.tracking.events import parse_events

    return services.ingest_events(project, run_id, parse_events(json.dumps(list(events)).encode()))
