from django.db import migrations


def create_generic(apps, schema_editor):
    Scenario = apps.get_model("tracking", "Scenario")
    Scenario.objects.get_or_create(
        key="generic",
        defaults={"name": "Generic (maximize score)", "score_metric": "score", "direction": "maximize",
                  "description": "The built-in scenario for projects created without one."},
    )


class Migration(migrations.Migration):
    dependencies = [("tracking", "0001_initial")]
    operations = [migrations.RunPython(create_generic, migrations.RunPython.noop)]
