"""The full-text index over messages' text (SPEC §1.3 ``q``), kept in step by the database."""

from django.db import migrations


def create_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    from ledger.search import search_index_create

    search_index_create(schema_editor.connection)


def drop_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    from ledger.search import search_index_drop

    search_index_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0004_cluster_starts_initializing"),
    ]

    operations = [
        migrations.RunPython(create_index, drop_index),
    ]
