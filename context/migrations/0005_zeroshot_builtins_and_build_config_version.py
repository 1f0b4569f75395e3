"""zeroshot's templates join the built-ins; a recorded build names the config version it used."""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def load_builtin(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from context.services.templates import templates_load_builtin

    templates_load_builtin(
        template_model=apps.get_model("context", "ClusterTemplate"),
        version_model=apps.get_model("context", "ClusterTemplateVersion"),
    )


class Migration(migrations.Migration):
    dependencies = [("context", "0004_build_reported_usage")]

    operations = [
        migrations.AddField(
            model_name="contextbuild",
            name="config_version",
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
        migrations.RunPython(load_builtin, migrations.RunPython.noop),
    ]
