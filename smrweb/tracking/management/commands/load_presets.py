from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking.services import scenarios


class Command(BaseCommand):
    help = (
        "Create or update the shipped scenario presets by key (idempotent: run it as often as you like). "
        "runstack runs it at start-up."
    )

    def add_arguments(self, parser):
        parser.add_argument("--file", default=str(scenarios.PRESETS_FIXTURE), help="a fixture of presets")

    def handle(self, *args, file: str, **options):
        try:
            results = scenarios.load_presets(file)
        except (OSError, ValueError) as exc:  # ValueError covers bad JSON and fields that do not validate
            raise CommandError(str(exc)) from None
        for key, action, changed in results:
            if action == "updated":
                self.stdout.write(f"updated scenario preset {key}: {', '.join(changed)}")
            elif action == "created":
                self.stdout.write(f"created scenario preset {key}")
        unchanged = [key for key, action, _ in results if action == "unchanged"]
        if unchanged:
            self.stdout.write(f"scenario presets unchanged: {', '.join(unchanged)}")
