"""Appending messages from other ledgers (zeroshot files, our exports, demo history)."""

from __future__ import annotations

from collections.abc import Sequence

from ledger.records import MessageRecord
from ledger.services.imported_rows import ImportedMessage
from ledger.services.writer import cluster_transaction


def message_import_batch(
    *, cluster_id: str, messages: Sequence[ImportedMessage], assume_absent: bool = False
) -> list[MessageRecord]:
    """Append messages that keep their ids and timestamps; ids already present are skipped.

    Imports take the source's values as they are (SPEC §1.1): no topic or size checks, no
    timestamp adjustment. Sequences follow the order given. Returns the newly stored messages,
    delivered on commit as imported (no subscriber reacts to them as events).
    """
    if not messages:
        return []
    with cluster_transaction(cluster_id) as writer:
        after = writer.last_sequence
        fresh = writer.import_messages(messages, assume_absent=assume_absent, deliver=True)
    return [
        m.as_record(cluster_id=cluster_id, sequence=seq) for seq, m in enumerate(fresh, after + 1)
    ]


def message_import_backfill(
    *, cluster_id: str, messages: Sequence[ImportedMessage], assume_absent: bool = False
) -> list[ImportedMessage]:
    """``message_import_batch`` for history nobody follows yet: nothing is handed to the bus.

    For filling a cluster the caller has just created (a zeroshot import): no subscriber takes
    imported messages as events, and no live client could follow the cluster before it existed,
    so building and pushing a record per message would only slow a million-row import down;
    a client that connects meanwhile catches up from the ledger (SPEC §1.4). Returns the
    messages stored, in sequence order.
    """
    if not messages:
        return []
    with cluster_transaction(cluster_id) as writer:
        return writer.import_messages(messages, assume_absent=assume_absent, deliver=False)
