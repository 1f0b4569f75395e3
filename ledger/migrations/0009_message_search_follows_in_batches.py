"""SQLite's full-text index follows new messages in batches (docs/decisions/0313).

Until now a trigger indexed each message as it was inserted, so the index holds every message:
its progress starts at the newest. The insert trigger goes; the delete and update triggers
come back with the condition that the index holds the row. PostgreSQL's index is unchanged.
"""

from typing import Any

from django.db import migrations

INDEX = "ledger_message_search"
PROGRESS = "ledger_message_search_upto"
TEXT = "json_extract({row}.content, '$.text')"
_FORGET = (
    f"INSERT INTO {INDEX}({INDEX}, rowid, text) "
    f"VALUES ('delete', old.id, {TEXT.format(row='old')});"
)
_ADD = f"INSERT INTO {INDEX}(rowid, text) VALUES (new.id, {TEXT.format(row='new')});"
_HELD = f"WHEN old.id <= (SELECT upto FROM {PROGRESS} WHERE id = 1)"
_TRIGGERS_DROP = [
    f"DROP TRIGGER IF EXISTS {INDEX}_{event}" for event in ("insert", "delete", "update")
]

FORWARD = [
    f"CREATE TABLE IF NOT EXISTS {PROGRESS} "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), upto INTEGER NOT NULL)",
    f"INSERT OR IGNORE INTO {PROGRESS} (id, upto) "
    "VALUES (1, COALESCE((SELECT max(id) FROM ledger_message), 0))",
    *_TRIGGERS_DROP,
    f"CREATE TRIGGER {INDEX}_delete AFTER DELETE ON ledger_message {_HELD} BEGIN {_FORGET} END",
    f"CREATE TRIGGER {INDEX}_update AFTER UPDATE OF content ON ledger_message {_HELD} BEGIN "
    f"{_FORGET} {_ADD} END",
]
BACKWARD = [
    # Whatever the index has not caught up with yet, indexed before the triggers take over.
    f"INSERT INTO {INDEX}(rowid, text) SELECT id, {TEXT.format(row='ledger_message')} "
    f"FROM ledger_message WHERE id > (SELECT upto FROM {PROGRESS} WHERE id = 1) ORDER BY id",
    *_TRIGGERS_DROP,
    f"DROP TABLE {PROGRESS}",
    f"CREATE TRIGGER {INDEX}_insert AFTER INSERT ON ledger_message BEGIN {_ADD} END",
    f"CREATE TRIGGER {INDEX}_delete AFTER DELETE ON ledger_message BEGIN {_FORGET} END",
    f"CREATE TRIGGER {INDEX}_update AFTER UPDATE OF content ON ledger_message BEGIN "
    f"{_FORGET} {_ADD} END",
]


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [INDEX]
            )
            if cursor.fetchone() is None:
                return  # no index to follow
            for statement in statements:
                cursor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0008_cluster_config_versions"),
    ]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
    ]
