# The git-workspace source (sources/git.py): the `git` source kind (the never-wired "workspace" value
# becomes "git"), a project's repository path and branch, and artifact versions keyed by commit as well
# as bytes, so a revert or a rollback commit is a version of its own (the blob is still stored once).

from django.db import migrations, models


def workspace_to_git(apps, schema_editor):
    apps.get_model("tracking", "Project").objects.filter(source="workspace").update(source="git")


def git_to_workspace(apps, schema_editor):
    apps.get_model("tracking", "Project").objects.filter(source="git").update(source="workspace")


class Migration(migrations.Migration):

    dependencies = [
        ('tracking', '0006_metric_point_run_index_redundant'),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='git_branch',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name='project',
            name='git_repo_path',
            field=models.CharField(blank=True, max_length=1000),
        ),
        migrations.AlterField(
            model_name='project',
            name='source',
            field=models.CharField(choices=[('push', 'REST push'), ('smr', 'Managed Research'), ('git', 'Git workspace')], default='push', max_length=20),
        ),
        migrations.RunPython(workspace_to_git, git_to_workspace, elidable=True),
        # The wider key first, then the narrower one goes: uniqueness is never unguarded in between.
        migrations.AddConstraint(
            model_name='artifact',
            constraint=models.UniqueConstraint(fields=('run', 'path', 'blob', 'commit'), name='artifact_run_path_blob_commit_uniq'),
        ),
        migrations.RemoveConstraint(
            model_name='artifact',
            name='artifact_run_path_blob_uniq',
        ),
    ]
