"""Exporting a cluster's ledger as JSON or JSON Lines, and importing such an export again.

An export holds every message in its SPEC §1.1 wire shape (``MessageRecord.to_wire()``), in
sequence order, read page by page with the ``after`` cursor so that memory stays flat however
long the ledger is:

- ``json``: ``{"cluster": {...}, "messages": [...]}``, one message per line inside the list;
- ``jsonl``: one message per line, nothing else (the cluster's config is not in it).

``cluster_import`` reads either back into a cluster (created when missing) with the same ids,
timestamps, content and metadata, in the same order, so that exporting, importing into an empty
database and exporting again gives the same messages, sequences included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ledger.errors import InvalidInput, NotFound
from ledger.filters import MAX_PAGE
from ledger.models import ClusterState
from ledger.records import JSON, ClusterRecord
from ledger.selectors import cluster_exists, cluster_get, message_tail
from ledger.services import (
    CLUSTER_ID_RE,
    ClusterWriter,
    ImportedMessage,
    cluster_create_transaction,
    cluster_transaction,
)
from ledger.zeroshot import StrPath, compact_json, message_to_json

ExportFormat = Literal["json", "jsonl"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("json", "jsonl")
CONTENT_TYPES: dict[ExportFormat, str] = {
    "json": "application/json",
    "jsonl": "application/x-ndjson",
}
# Messages stored per step of the one transaction of an import.
IMPORT_BATCH = 5000


class ExportFormatError(InvalidInput):
    """A file that is not an export of ours."""

    code = "export_format"


def cluster_export_header(cluster: ClusterRecord) -> dict[str, JSON]:
    """The ``cluster`` object of a JSON export: what recreating the cluster needs."""
    return {
        "id": cluster.id,
        "created_at": cluster.created_at,
        "state": cluster.state,
        "template": cluster.template,
        "params": cluster.params,
        "labels": cluster.labels,
        "config": cluster.config,
        "message_count": cluster.message_count,
    }


def cluster_export(*, cluster_id: str, format: ExportFormat) -> Iterator[str]:
    """Chunks of text of a cluster's export; ``NotFound`` is raised before the first chunk."""
    if format not in EXPORT_FORMATS:
        raise InvalidInput(
            f"format must be one of {', '.join(EXPORT_FORMATS)}",
            details={"field": "format", "value": format},
        )
    cluster = cluster_get(cluster_id=cluster_id)
    # Not a generator itself, so that a missing cluster fails here, before anything is sent.
    return _export_chunks(cluster=cluster, format=format)


def _export_chunks(*, cluster: ClusterRecord, format: ExportFormat) -> Iterator[str]:
    if format == "jsonl":
        for page in _pages(cluster_id=cluster.id):
            yield "".join(f"{message_to_json(wire)}\n" for wire in page)
        return
    yield f'{{"cluster": {compact_json(cluster_export_header(cluster))},\n"messages": [\n'
    separator = ""
    for page in _pages(cluster_id=cluster.id):
        yield separator + ",\n".join(message_to_json(wire) for wire in page)
        separator = ",\n"
    yield "\n]}\n"


def _pages(*, cluster_id: str) -> Iterator[list[dict[str, JSON]]]:
    after = 0
    while page := message_tail(cluster_id=cluster_id, after=after, limit=MAX_PAGE):
        yield [record.to_wire() for record in page]
        after = page[-1].sequence


# --- importing an export -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterImport:
    """What importing an export did."""

    cluster_id: str
    imported: int
    skipped: int
    created: bool


def cluster_import(*, path: StrPath, cluster_id: str | None = None) -> ClusterImport:
    """Import one of our exports (json or jsonl) into a cluster, created when missing.

    All or nothing, in one transaction: a line that cannot be read or stored is reported with
    the file and the line, and nothing of the file is kept, not even a cluster it created.
    """
    source = Path(path)
    try:
        with source.open(encoding="utf-8") as file:
            first = file.readline()
            header, wires = _read_export(first=first, rest=file, name=str(source))
            return _import_wires(header=header, wires=wires, cluster_id=cluster_id)
    except UnicodeDecodeError as error:
        raise ExportFormatError(
            f"{source} is not UTF-8 text (a byte at offset {error.start} of a read block "
            "cannot be decoded): not an export"
        ) from error
    except OSError as error:
        raise NotFound(
            f"cannot read {source}: {error.strerror or error}", details={"path": str(source)}
        ) from error


def _read_export(
    *, first: str, rest: Iterable[str], name: str
) -> tuple[dict[str, JSON] | None, Iterator[tuple[str, dict[str, JSON]]]]:
    """The cluster header (json) or None (jsonl), and the messages with where they are."""
    try:
        first_value = json.loads(first) if first.strip() else None
    except (ValueError, RecursionError):
        first_value = None
    if isinstance(first_value, dict) and "topic" in first_value:
        return None, _jsonl_wires(first=first, rest=rest, name=name)
    # A JSON document (ours writes one message per line, but any layout is accepted).
    try:
        document = json.loads(first + "".join(rest))
    except (ValueError, RecursionError) as error:
        raise ExportFormatError(f"{name} is neither JSON nor JSON Lines: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise ExportFormatError(f'{name} must hold {{"cluster": {{...}}, "messages": [...]}}')
    header = document.get("cluster")
    return (
        header if isinstance(header, dict) else {},
        ((f"{name}, message {index + 1}", wire) for index, wire in enumerate(document["messages"])),
    )


def _jsonl_wires(
    *, first: str, rest: Iterable[str], name: str
) -> Iterator[tuple[str, dict[str, JSON]]]:
    yield f"{name}, line 1", _parse_line(first, where=f"{name}, line 1")
    for number, line in enumerate(rest, start=2):
        if line.strip():
            where = f"{name}, line {number}"
            yield where, _parse_line(line, where=where)


def _parse_line(line: str, *, where: str) -> dict[str, JSON]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise ExportFormatError(f"{where}: not JSON ({error})") from error
    if not isinstance(value, dict):
        raise ExportFormatError(f"{where}: a message must be a JSON object")
    return value


def _import_wires(
    *,
    header: dict[str, JSON] | None,
    wires: Iterator[tuple[str, dict[str, JSON]]],
    cluster_id: str | None,
) -> ClusterImport:
    first = next(wires, None)
    first_message = _imported(first[1], where=first[0]) if first is not None else None
    target: object = cluster_id or (header or {}).get("id")
    if not target and first is not None:
        target = first[1].get("cluster_id")
    if not isinstance(target, str) or not CLUSTER_ID_RE.fullmatch(target):
        raise ExportFormatError(
            "the export names no valid cluster id; give one with --cluster",
            details={"cluster_id": repr(target)},
        )
    created = not cluster_exists(cluster_id=target)
    transaction = (
        _cluster_create_transaction(
            cluster_id=target,
            header=header,
            first=first_message.timestamp if first_message is not None else None,
        )
        if created
        else cluster_transaction(target)
    )
    imported = skipped = 0
    with transaction as writer:
        batch: list[tuple[str, ImportedMessage]] = []
        if first is not None and first_message is not None:
            batch.append((first[0], first_message))
        for where, wire in wires:
            batch.append((where, _imported(wire, where=where)))
            if len(batch) == IMPORT_BATCH:
                stored = _store(writer, batch)
                imported, skipped, batch = imported + stored, skipped + len(batch) - stored, []
        if batch:
            stored = _store(writer, batch)
            imported, skipped = imported + stored, skipped + len(batch) - stored
    return ClusterImport(cluster_id=target, imported=imported, skipped=skipped, created=created)


def _store(writer: ClusterWriter, batch: list[tuple[str, ImportedMessage]]) -> int:
    """Store a batch; a message the ledger refuses is named by its line."""
    try:
        return len(writer.import_messages([m for _, m in batch], deliver=True))
    except InvalidInput as error:
        index = error.details.get("index") if isinstance(error.details, dict) else None
        if isinstance(index, int) and 0 <= index < len(batch):
            raise ExportFormatError(
                f"{batch[index][0]}: {error.message}", details=error.details
            ) from error
        raise


def _cluster_create_transaction(
    *, cluster_id: str, header: dict[str, JSON] | None, first: int | None
) -> AbstractContextManager[ClusterWriter]:
    """The transaction that creates the cluster from the export's header and fills it."""
    header = header or {}
    state = header.get("state")
    created_at = header.get("created_at")
    config = header.get("config")
    params = header.get("params")
    template = header.get("template")
    try:
        return cluster_create_transaction(
            cluster_id=cluster_id,
            labels=header.get("labels"),
            config=config if isinstance(config, dict) else {"agents": []},
            params=params if isinstance(params, dict) else {},
            template=template if isinstance(template, str) else "",
            state=state if state in ClusterState.values else ClusterState.STOPPED,
            created_at=created_at if _is_int(created_at) else first,
        )
    except InvalidInput as error:
        raise ExportFormatError(
            f"the export's cluster header cannot make a cluster: {error.message}",
            details=error.details,
        ) from error


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _imported(wire: dict[str, Any], *, where: str) -> ImportedMessage:
    """An exported message as it is to be stored again; its fields are checked for type only."""
    content = wire.get("content", {})
    checks = {
        "id": isinstance(wire.get("id"), str) and wire.get("id"),
        "timestamp": _is_int(wire.get("timestamp")),
        "topic": isinstance(wire.get("topic"), str),
        "sender": isinstance(wire.get("sender"), str),
        "receiver": isinstance(wire.get("receiver", "broadcast"), str),
        "content": isinstance(content, dict) and set(content) <= {"text", "data"},
    }
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        raise ExportFormatError(
            f"{where}: {', '.join(bad)} missing or of the wrong type", details={"fields": bad}
        )
    return ImportedMessage(
        id=wire["id"],
        timestamp=wire["timestamp"],
        topic=wire["topic"],
        sender=wire["sender"],
        receiver=wire.get("receiver", "broadcast"),
        content=content,
        metadata=wire.get("metadata"),
    )
