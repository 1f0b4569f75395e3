"""``expired`` and ``dropped`` become task states of their own (runs/states.py).

A trigger dropped from a full buffer was ``cancelled`` with an error text starting
``dropped:``; it is now ``dropped``. A task ``claimed`` under a lease that has run out stays as
it is: the next claim ends that lease through the state machine (``tasks_expire``), which
counts the attempt against the agent's ``maxRetries``.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def dropped_forward(apps: Any, schema_editor: Any) -> None:
    Task = apps.get_model("runs", "Task")
    Task.objects.filter(state="cancelled", error__startswith="dropped:").update(state="dropped")


def dropped_backward(apps: Any, schema_editor: Any) -> None:
    Task = apps.get_model("runs", "Task")
    Task.objects.filter(state="dropped").update(state="cancelled")
    # The old code took a claimed task with a past lease as claimable.
    Task.objects.filter(state="expired").update(state="claimed", lease_expires_at=0)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="task",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("claimed", "Claimed"),
                    ("expired", "Expired"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                    ("dropped", "Dropped"),
                ],
                default="queued",
                max_length=16,
            ),
        ),
        migrations.RunPython(dropped_forward, dropped_backward),
    ]
