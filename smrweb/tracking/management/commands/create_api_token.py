from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import services
from smrweb.tracking.models import Project


class Command(BaseCommand):
    help = "Create an API token for a project. The token is printed once, on the last line."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, slug, name, **options):
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"No project {slug!r}.")
        token, raw = services.create_api_token(project, name=name)
        self.stderr.write(
            f"token {token.name!r} for project {project.slug}; store it now, it is not shown again:"
        )
        self.stdout.write(raw)
