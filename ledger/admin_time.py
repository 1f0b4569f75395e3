"""Times in the admin as the dashboard shows them: one ``<time>`` the page's script localises.

Epoch milliseconds (and the admin's own datetimes) become ``<time data-ms data-format="full">``
holding ``2026-02-02 09:17:55 UTC``, which ``static/js/app.js`` (loaded by the admin's base
template) rewrites in the operator's time zone, in the dashboard's one date format.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString


def admin_time(value: int | datetime | None) -> SafeString | str:
    """An instant (epoch ms or a datetime) as the dashboard's ``<time>``; "-" for none."""
    if value is None:
        return "-"
    try:
        moment = (
            value.astimezone(UTC)
            if isinstance(value, datetime)
            else datetime.fromtimestamp(int(value) / 1000, tz=UTC)
        )
    except (ValueError, OverflowError, OSError):
        return str(value)
    ms = int(moment.timestamp() * 1000)
    utc = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    iso = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return format_html(
        '<time datetime="{}" data-ms="{}" data-format="full" title="{}">{}</time>',
        iso,
        ms,
        utc,
        utc,
    )


def admin_time_column(field: str, description: str) -> Callable[[Any, Any], SafeString | str]:
    """A list or read-only column showing ``field`` of a row with ``admin_time``, sortable."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> SafeString | str:
        return admin_time(getattr(obj, field))

    column.__name__ = f"{field}_time"
    return column
