from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import backup


class Command(BaseCommand):
    help = (
        "Restore a project from an archive written by export_project (docs/backup.md). The archive is "
        "verified whole first and written in one transaction: a refused import writes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("archive")
        parser.add_argument(
            "--as",
            dest="new_slug",
            metavar="NEWSLUG",
            help="the slug to restore under (default: the archived one, which must be free)",
        )
        parser.add_argument(
            "--scenario-as",
            dest="scenario_key",
            metavar="NEWKEY",
            help="restore the archived scenario under this key (when the one of its key differs here)",
        )
        parser.add_argument(
            "--trust",
            action="store_true",
            help="also restore what grants access or sends requests: API tokens, memberships, the "
            "SMR backend address and key, the rollback webhook (only for archives you made)",
        )

    def handle(self, *args, archive, new_slug, scenario_key, trust=False, **options):
        try:
            result = backup.import_project(archive, slug=new_slug, scenario_key=scenario_key, trust=trust)
        except backup.BackupError as exc:
            raise CommandError(exc.message) from None
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        if result.created_users:
            self.stdout.write(
                "created inactive users without a password (an admin activates them): "
                + ", ".join(result.created_users)
            )
        counts = ", ".join(f"{n} {table}" for table, n in result.counts.items() if n)
        self.stdout.write(f"imported project {result.project.slug}: {counts}")
