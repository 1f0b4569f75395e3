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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ledger.errors import InvalidInput, NotFound
from ledger.filters import MAX_PAGE
from ledger.models import ClusterState
from ledger.records import JSON, ClusterRecord
from ledger.selectors import cluster_get, message_tail
from ledger.services import (
    CLUSTER_ID_RE,
    ImportedMessage,
    cluster_create,
    message_import_batch,
)
from ledger.zeroshot import StrPath, compact_json, message_to_json

ExportFormat = Literal["json", "jsonl"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("json", "jsonl")
CONTENT_TYPES: dict[ExportFormat, str] = {
    "json": "application/json",
    "jsonl": "application/x-ndjson",
}
IMPORT_BATCH = 1000


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
    """Import one of our exports (json or jsonl) into a cluster, created when missing."""
    source = Path(path)
    try:
        with source.open(encoding="utf-8") as file:
            first = file.readline()
            header, wires = _read_export(first=first, rest=file, name=str(source))
            return _import_wires(header=header, wires=wires, cluster_id=cluster_id)
    except OSError as error:
        raise NotFound(f"cannot read {source}: {error}", details={"path": str(source)}) from error


def _read_export(
    *, first: str, rest: Iterable[str], name: str
) -> tuple[dict[str, JSON] | None, Iterator[tuple[int, dict[str, JSON]]]]:
    """The cluster header (json) or None (jsonl), and the messages with their line numbers."""
    try:
        first_value = json.loads(first) if first.strip() else None
    except ValueError:
        first_value = None
    if isinstance(first_value, dict) and "topic" in first_value:
        return None, _jsonl_wires(first=first, rest=rest, name=name)
    # A JSON document (ours writes one message per line, but any layout is accepted).
    try:
        document = json.loads(first + "".join(rest))
    except ValueError as error:
        raise ExportFormatError(f"{name} is neither JSON nor JSON Lines: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise ExportFormatError(f'{name} must hold {{"cluster": {{...}}, "messages": [...]}}')
    header = document.get("cluster")
    return (
        header if isinstance(header, dict) else {},
        ((index + 1, wire) for index, wire in enumerate(document["messages"])),
    )


def _jsonl_wires(
    *, first: str, rest: Iterable[str], name: str
) -> Iterator[tuple[int, dict[str, JSON]]]:
    for number, line in enumerate([first], start=1):
        yield number, _parse_line(line, number=number, name=name)
    for number, line in enumerate(rest, start=2):
        if line.strip():
            yield number, _parse_line(line, number=number, name=name)


def _parse_line(line: str, *, number: int, name: str) -> dict[str, JSON]:
    try:
        value = json.loads(line)
    except ValueError as error:
        raise ExportFormatError(f"{name}, line {number}: not JSON ({error})") from error
    if not isinstance(value, dict):
        raise ExportFormatError(f"{name}, line {number}: a message must be a JSON object")
    return value


def _import_wires(
    *,
    header: dict[str, JSON] | None,
    wires: Iterator[tuple[int, dict[str, JSON]]],
    cluster_id: str | None,
) -> ClusterImport:
    target: object = cluster_id or (header or {}).get("id")
    created: bool | None = None  # until the first message names the cluster
    imported = skipped = 0
    batch: list[ImportedMessage] = []

    def flush() -> None:
        nonlocal imported, skipped, batch
        stored = message_import_batch(cluster_id=str(target), messages=batch)
        imported, skipped, batch = imported + len(stored), skipped + len(batch) - len(stored), []

    for number, wire in wires:
        message = _imported(wire, where=f"message {number}")
        if created is None:
            target = target or wire.get("cluster_id")
            created = _cluster_ensure(cluster_id=target, header=header, first=message.timestamp)
        batch.append(message)
        if len(batch) == IMPORT_BATCH:
            flush()
    if created is None:
        created = _cluster_ensure(cluster_id=target, header=header, first=None)
    if batch:
        flush()
    return ClusterImport(
        cluster_id=str(target), imported=imported, skipped=skipped, created=created
    )


def _cluster_ensure(
    *, cluster_id: object, header: dict[str, JSON] | None, first: int | None
) -> bool:
    """Create the cluster from the export's header unless it exists; True when created."""
    if not isinstance(cluster_id, str) or not CLUSTER_ID_RE.match(cluster_id):
        raise ExportFormatError(
            "the export names no valid cluster id; give one with --cluster",
            details={"cluster_id": cluster_id},
        )
    try:
        cluster_get(cluster_id=cluster_id)
    except NotFound:
        pass
    else:
        return False
    header = header or {}
    state = header.get("state")
    created_at = header.get("created_at")
    config = header.get("config")
    params = header.get("params")
    template = header.get("template")
    cluster_create(
        cluster_id=cluster_id,
        config=config if isinstance(config, dict) else {"agents": []},
        params=params if isinstance(params, dict) else {},
        template=template if isinstance(template, str) else "",
        state=state if state in ClusterState.values else ClusterState.STOPPED,
        created_at=created_at if _is_int(created_at) else first,
    )
    return True


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
