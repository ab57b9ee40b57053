from django.core.management.base import BaseCommand, CommandError

from smrweb.sources import smr
from smrweb.sources.git.ownership import pin_for_binding
from smrweb.tracking import services
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import Scenario, SourceKind


class Command(BaseCommand):
    help = "Create a project. Without --scenario it gets the built-in generic scenario (maximize `score`)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--scenario", help="Key of an existing scenario")
        parser.add_argument("--source", choices=SourceKind.values, default=SourceKind.PUSH)
        parser.add_argument("--smr-project-id", default="")
        parser.add_argument(
            "--smr-backend-base", default="", help="override SMRWEB_SMR_BACKEND_BASE for this project"
        )
        parser.add_argument(
            "--smr-api-key-env",
            default="",
            help="name of an environment variable holding this project's SMR API key "
            "(stored sealed; never printed)",
        )
        parser.add_argument(
            "--allow-duplicate",
            action="store_true",
            help="bind an SMR project id that another smrweb project is already bound to",
        )
        parser.add_argument(
            "--skip-check",
            action="store_true",
            help="--source smr: bind without asking the backend whether the key may read the "
            "project (e.g. before the backend is reachable)",
        )
        parser.add_argument(
            "--git-repo", default="", help="--source git: absolute path of the local repository"
        )
        parser.add_argument(
            "--git-branch", default="", help="--source git: the branch whose commits are the run"
        )

    def handle(
        self,
        *args,
        slug,
        name,
        scenario,
        source,
        smr_project_id,
        smr_backend_base,
        smr_api_key_env,
        git_repo="",
        git_branch="",
        allow_duplicate=False,
        skip_check=False,
        **options,
    ):
        import os

        if source == SourceKind.GIT:
            from smrweb.sources.base import SourceError
            from smrweb.sources.git.cli import check_branch

            git_repo = os.path.abspath(os.path.expanduser(git_repo)) if git_repo else ""
            try:
                check_branch(git_branch)  # what git itself accepts, before anything is created
            except SourceError as exc:
                raise CommandError(str(exc)) from None

        api_key = os.environ.get(smr_api_key_env, "") if smr_api_key_env else ""
        if smr_api_key_env and not api_key:
            raise CommandError(f"The environment variable {smr_api_key_env} is empty or unset.")
        found = None
        if scenario:
            found = Scenario.objects.filter(key=scenario).first()
            if found is None:
                keys = ", ".join(Scenario.objects.values_list("key", flat=True))
                raise CommandError(f"No scenario {scenario!r}. Known: {keys}")
        try:
            project = services.create_project(
                slug,
                name=name,
                scenario=found,
                source=source,
                smr_project_id=smr_project_id,
                smr_backend_base=smr_backend_base,
                smr_api_key=api_key,
                git_repo_path=git_repo,
                git_branch=git_branch,
                allow_shared_smr_project=allow_duplicate,
                check_binding=None if skip_check else smr.check_binding,
                pin_repository=pin_for_binding if source == SourceKind.GIT else None,
            )
        except TrackingError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"created project {project.slug} (scenario {project.scenario.key}, source {project.source})"
        )
        if pin := project.source_settings.get(services.GIT_PIN):
            self.stdout.write(f"pinned its repository to {pin['git_dir']}")
        elif source == SourceKind.GIT:
            self.stdout.write(f"no repository at {git_repo} yet: the first sync that finds one pins it")
