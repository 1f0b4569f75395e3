"""Load the built-in cluster templates so that a fresh database has them (safe to re-run)."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def load_builtin(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from context.services.templates import templates_load_builtin

    templates_load_builtin(
        template_model=apps.get_model("context", "ClusterTemplate"),
        version_model=apps.get_model("context", "ClusterTemplateVersion"),
    )


class Migration(migrations.Migration):
    dependencies = [("context", "0002_clustertemplate_clustertemplateversion")]

    operations = [migrations.RunPython(load_builtin, migrations.RunPython.noop)]
