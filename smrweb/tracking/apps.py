from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "smrweb.tracking"
    label = "tracking"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        import smrweb.core.checks  # noqa: F401  (registers the deployment checks)

        post_migrate.connect(_backfill_derived, sender=self)


def _backfill_derived(sender, using, plan=None, **kwargs) -> None:
    """Derived rows an upgrade left missing (the projects' figures), computed by the current code once
    the whole schema is in place (not inside a migration, where later columns do not exist yet)."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    from smrweb.tracking.services.figures import backfill_missing

    if not plan:  # nothing was migrated (a no-op migrate, a flush)
        return
    executor = MigrationExecutor(connections[using])
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        return  # not at the newest schema (migrated to an older one): the current code does not fit it
    backfill_missing(using)
