"""The ledger view a script reads, loaded from the database (SPEC §7.2).

The trigger stage keeps its view per cluster and extends it message by message; this reads one
afresh (a new process, a batch the kept view does not line up with, a hook's script). It holds
what ``LedgerView`` would hold had it seen the whole cluster: the newest messages within its
bounds, ``AGENT_OUTPUT`` included up to its own bound (docs/decisions/0131).
"""

from __future__ import annotations

import heapq

from ledger import interfaces as ledger
from ledger.interfaces import Topic
from runs.logic import OUTPUT_MAX_MESSAGES, VIEW_MAX_MESSAGES, LedgerView


def script_view_read(*, cluster_id: str, up_to_sequence: int) -> LedgerView:
    """The cluster as of ``up_to_sequence``, as scripts see it (two index walks)."""
    others = ledger.message_window(
        cluster_id=cluster_id,
        up_to_sequence=up_to_sequence,
        limit=VIEW_MAX_MESSAGES,
        skip_topic=Topic.AGENT_OUTPUT,
    )
    outputs = ledger.message_window(
        cluster_id=cluster_id,
        up_to_sequence=up_to_sequence,
        limit=OUTPUT_MAX_MESSAGES,
        only_topic=Topic.AGENT_OUTPUT,
    )
    merged = heapq.merge(others, outputs, key=lambda m: m.sequence)
    return LedgerView(m.to_wire() for m in merged)
