"""The agents' API for messages (SPEC §6.1): publish, batch, query, export."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Query, Router
from ninja.responses import Status

from ledger import exporting, selectors, services
from ledger.keys import require_cluster
from ledger.schemas import (
    BODY_ERRORS,
    READ_ERRORS,
    BatchIn,
    MessageIn,
    MessageOut,
    MessagePageOut,
    MessageQueryIn,
    error_responses,
)
from ledger.threads import in_database

# Publishing: everything that can go wrong with a body on a cluster, and a stored id or key.
PUBLISH_ERRORS = error_responses(*READ_ERRORS, *BODY_ERRORS, 409)

router = Router(tags=["ledger"])


@router.post(
    "/clusters/{cluster_id}/messages",
    response={201: MessageOut, **PUBLISH_ERRORS},
    summary="Publish one message",
    exclude_unset=True,
)
async def messages_publish(
    request: HttpRequest, cluster_id: str, payload: MessageIn
) -> Status[Any]:
    require_cluster(request, cluster_id)
    record = await in_database(services.message_publish)(
        cluster_id=cluster_id, draft=payload.draft()
    )
    return Status(201, record.to_wire())


@router.post(
    "/clusters/{cluster_id}/messages/batch",
    response={201: list[MessageOut], **PUBLISH_ERRORS},
    summary="Publish messages atomically",
    exclude_unset=True,
)
async def messages_publish_batch(
    request: HttpRequest, cluster_id: str, payload: BatchIn
) -> Status[Any]:
    require_cluster(request, cluster_id)
    records = await in_database(services.message_publish_batch)(
        cluster_id=cluster_id, drafts=[m.draft() for m in payload.messages]
    )
    return Status(201, [r.to_wire() for r in records])


@router.get(
    "/clusters/{cluster_id}/messages",
    response={200: MessagePageOut, **error_responses(*READ_ERRORS)},
    summary="Query messages",
    exclude_unset=True,
)
def messages_query(
    request: HttpRequest, cluster_id: str, filters: Annotated[MessageQueryIn, Query()]
) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    selectors.cluster_get(cluster_id=cluster_id)
    records = selectors.message_query(
        cluster_id=cluster_id, where=filters.to_filter(), limit=filters.limit, order=filters.order
    )
    full_page = len(records) == filters.limit
    next_after = str(records[-1].sequence) if full_page and filters.order == "asc" else None
    return {"items": [r.to_wire() for r in records], "next_after": next_after}


@router.get(
    "/clusters/{cluster_id}/export",
    response=error_responses(*READ_ERRORS),
    openapi_extra={
        "responses": {
            200: {
                "description": "the export, streamed",
                "content": {media: {} for media in exporting.CONTENT_TYPES.values()},
            }
        }
    },
    summary="Export the ledger (streamed)",
    description="Every message in sequence order: `jsonl` (one message per line) or `json` "
    '(`{"cluster": {...}, "messages": [...]}`).',
)
def clusters_export(
    request: HttpRequest, cluster_id: str, format: Literal["jsonl", "json"] = "jsonl"
) -> StreamingHttpResponse:
    require_cluster(request, cluster_id)
    chunks = exporting.cluster_export(cluster_id=cluster_id, format=format)
    response = StreamingHttpResponse(chunks, content_type=exporting.CONTENT_TYPES[format])
    response["Content-Disposition"] = f'attachment; filename="{cluster_id}.{format}"'
    return response
