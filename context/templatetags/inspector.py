"""Template filters of the context pages."""

from __future__ import annotations

from django import template

from context.presentation import time_text

register = template.Library()


@register.filter
def ms_time(value: int | None) -> str:
    """Milliseconds since the epoch as readable UTC text (the fallback inside ``<time>``)."""
    return time_text(value) if isinstance(value, int) else ""
