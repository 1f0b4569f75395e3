"""The cluster page's out-of-band fragments, for a live push and for a page that catches up.

They are the page's own partials (``cluster_detail.html``), so a live page and a reloaded one
look the same: the timeline rows, the header's message count and the snapshot panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.template.loader import render_to_string

from dashboard.presentation.timeline import rows_html
from ledger.interfaces import MessageRecord
from snapshots.state import SNAPSHOT_TOPIC

PAGE = "dashboard/cluster_detail.html"


def timeline_rows_html(messages: Sequence[MessageRecord]) -> str:
    """Rows (newest first) wrapped as one out-of-band insert at the top of the timeline."""
    rows = rows_html((m, None) for m in messages)
    return f'<ol hx-swap-oob="afterbegin:#timeline-rows">{rows}</ol>'


def count_html(cluster_id: str, last_sequence: int) -> str:
    """The header's message count; sequences run from 1 without gaps, so the last one is it."""
    return render_to_string(
        f"{PAGE}#message-count",
        {"cluster_id": cluster_id, "message_count": last_sequence, "oob": True},
    )


def snapshot_html(snapshot: MessageRecord) -> str:
    """The snapshot panel showing ``snapshot``, as an out-of-band replacement."""
    return render_to_string(f"{PAGE}#snapshot-panel", {"snapshot": snapshot, "oob": True})


@dataclass(frozen=True, slots=True)
class PushFragments:
    """What one new message adds to a page: its row, and for a ``STATE_SNAPSHOT`` the snapshot
    panel (``rest``, empty for any other topic). The header's count is not a message's: a push
    writes it once, for the last message it carries (``count_html``)."""

    row: str
    rest: str

    def html(self, *, with_row: bool) -> str:
        """The push for a page that shows the row (``with_row``) or one whose filters hide it."""
        return self.row + self.rest if with_row else self.rest


def push_fragments(message: MessageRecord) -> PushFragments:
    """The row of one new message and, for a snapshot, its panel, rendered."""
    rest = snapshot_html(message) if message.topic == SNAPSHOT_TOPIC else ""
    return PushFragments(row=timeline_rows_html([message]), rest=rest)
