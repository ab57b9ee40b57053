"""Red-team finding 1 and 4: who may bind a source, and which scenarios a project may use.

- Scenarios get `shared`: the built-in generic scenario and the shipped presets are shared (anyone who may
  create a project may use them); every other scenario becomes attachable by staff only.
- SMR projects that staff or the command line created keep using the operator's SMR key
  (`source_settings.operator_key`); a project a non-staff user created must bring a key of its own, so
  a mirror of someone else's SMR project made through the operator's key stops syncing.
"""

from django.db import migrations, models

PRESET_KEYS = ("generic", "optimizer-hill-climb", "onnx-arena-dogfight")


def forwards(apps, schema_editor):
    Scenario = apps.get_model("tracking", "Scenario")
    Project = apps.get_model("tracking", "Project")
    AuditEvent = apps.get_model("tracking", "AuditEvent")
    Scenario.objects.filter(key__in=PRESET_KEYS).update(shared=True)
    for project in Project.objects.filter(source="smr"):
        created = AuditEvent.objects.filter(verb="project.created", object_type="project",
                                            object_id=str(project.pk)).select_related("actor").first()
        actor = created.actor if created is not None else None
        by_operator = created is not None and (actor is None and created.actor_label == "system"
                                               or actor is not None and actor.is_staff)
        if by_operator and not project.source_settings.get("api_key_sealed"):
            project.source_settings = {**project.source_settings, "operator_key": True}
            project.save(update_fields=["source_settings"])


class Migration(migrations.Migration):

    dependencies = [
        ("tracking", "0007_git_workspace_source"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="project",
            options={"ordering": ["slug"], "permissions": [
                ("bind_source", "Can bind a project to an SMR project, an SMR backend or a git repository")]},
        ),
        migrations.AddField(
            model_name="scenario",
            name="shared",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
