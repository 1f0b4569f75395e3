from django.db import migrations, models
from django.db.models import F


def cursor_at_the_end(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Clusters that existed before the pipeline have nothing left to offer to it."""
    cluster_model = apps.get_model("ledger", "Cluster")
    cluster_model.objects.update(pipeline_sequence=F("last_sequence"))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_message_event"),
    ]

    operations = [
        migrations.AddField(
            model_name="cluster",
            name="pipeline_sequence",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="message",
            name="imported",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunPython(cursor_at_the_end, migrations.RunPython.noop),
    ]
