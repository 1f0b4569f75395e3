"""The per-day sums of reported usage (``UsageDay``), kept as tasks complete."""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import F, Value
from django.db.models.functions import Coalesce

from ledger.interfaces import JSON
from runs.models import UsageDay

DAY_MS = 86_400_000
MODEL_MAX = 200


def _count(value: JSON) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _cost(value: JSON) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def usage_day_add(*, agent_id: str, usage: Mapping[str, JSON], finished_at: int) -> None:
    """Add one completed task's reported usage to its day's row, in the caller's transaction.

    The row is made if missing (``ON CONFLICT DO NOTHING``: completions in two clusters may
    make it at once), then counted up in place: two statements, whoever else writes it.
    """
    model = usage.get("model")
    key = {
        "day": finished_at // DAY_MS,
        "agent_id": agent_id[:64],
        "model": model[:MODEL_MAX] if isinstance(model, str) else "",
    }
    cost = _cost(usage.get("costUsd"))
    changes = {
        "tasks": F("tasks") + 1,
        "input_tokens": F("input_tokens") + _count(usage.get("inputTokens")),
        "output_tokens": F("output_tokens") + _count(usage.get("outputTokens")),
    }
    if cost is not None:
        changes["cost_usd"] = Coalesce(F("cost_usd"), Value(0.0)) + cost
    UsageDay.objects.bulk_create([UsageDay(**key)], ignore_conflicts=True)
    UsageDay.objects.filter(**key).update(**changes)
