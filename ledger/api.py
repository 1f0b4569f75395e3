"""The agents' API for clusters and messages (SPEC §6.1)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Query, Router, Schema
from ninja.responses import Status
from pydantic import ConfigDict, StrictInt

# No import cycle: ledger's services and selectors never import the context app.
from context.template_services import cluster_create_from_template
from ledger import exporting, selectors, services
from ledger.keys import ApiKeyIdentity
from ledger.records import ClusterRecord, MessageRecord
from zeroshot_web.errors import Forbidden, InvalidInput

router = Router(tags=["ledger"])

TOPIC_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"


class MessageIn(Schema):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(pattern=TOPIC_PATTERN, description="e.g. PLAN_READY")
    sender: str = Field(min_length=1, max_length=128)
    receiver: str = Field("broadcast", min_length=1, max_length=128)
    content: dict[str, Any] | None = Field(None, description="{text?: string, data?: any JSON}")
    metadata: dict[str, Any] | None = None
    timestamp: StrictInt | None = Field(None, ge=0, description="ms since the epoch")
    id: str | None = Field(None, min_length=1, max_length=128)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)

    def draft(self) -> services.MessageDraft:
        return services.MessageDraft(
            topic=self.topic,
            sender=self.sender,
            receiver=self.receiver,
            content=dict(self.content or {}),
            metadata=self.metadata,
            timestamp=self.timestamp,
            id=self.id,
            idempotency_key=self.idempotency_key,
        )


class BatchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    messages: list[MessageIn]


class MessageOut(Schema):
    id: str
    sequence: str = Field(description="decimal digits; a string so that it stays exact")
    timestamp: int
    cluster_id: str
    topic: str
    sender: str
    receiver: str
    content: dict[str, Any] | None = None
    metadata: Any = None


class MessagePageOut(Schema):
    items: list[MessageOut]
    next_after: str | None = Field(
        description="pass as `after` to read the next page; null when this page is the last"
    )


class MessageQueryIn(Schema):
    topic: str | None = None
    sender: str | None = None
    receiver: str | None = None
    since: int | None = Field(None, description="timestamp >= since (ms)")
    until: int | None = Field(None, description="timestamp <= until (ms)")
    after: int | None = Field(None, description="sequence > after: the cursor for tailing")
    limit: int = Field(selectors.DEFAULT_PAGE, ge=1, le=selectors.MAX_PAGE)
    order: Literal["asc", "desc"] = "asc"


class ClusterCreateIn(Schema):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, description="generated as adjective-noun-NN when absent")
    template: str | None = None
    params: dict[str, Any] | None = None
    config: dict[str, Any] | None = None


class ClusterOut(Schema):
    id: str
    state: str
    template: str | None
    created_at: int
    message_count: int
    last_activity: int | None
    agent_count: int


class ClusterDetailOut(ClusterOut):
    agents: list[dict[str, Any]]
    params: dict[str, Any]


def message_out(record: MessageRecord) -> dict[str, Any]:
    return record.to_wire()


def cluster_out(record: ClusterRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "state": record.state,
        "template": record.template,
        "created_at": record.created_at,
        "message_count": record.message_count,
        "last_activity": record.last_activity,
        "agent_count": len(record.agents),
    }


def require_cluster(request: HttpRequest, cluster_id: str) -> None:
    """Refuse a key limited to another cluster (403)."""
    identity = request.auth  # type: ignore[attr-defined]
    if isinstance(identity, ApiKeyIdentity) and not identity.may_access(cluster_id):
        raise Forbidden(
            f"this API key is limited to cluster {identity.cluster_id!r}",
            details={"cluster_id": cluster_id},
        )


def scoped_cluster(request: HttpRequest) -> str | None:
    identity = request.auth  # type: ignore[attr-defined]
    return identity.cluster_id if isinstance(identity, ApiKeyIdentity) else None


@router.get("/clusters", response=list[ClusterOut], summary="List clusters")
def clusters_list(request: HttpRequest, search: str = "", state: str = "") -> list[dict[str, Any]]:
    records = selectors.cluster_list(search=search, state=state, only_id=scoped_cluster(request))
    return [cluster_out(r) for r in records]


@router.post("/clusters", response={201: ClusterDetailOut}, summary="Create a cluster")
def clusters_create(request: HttpRequest, payload: ClusterCreateIn) -> Status[Any]:
    if scoped_cluster(request) is not None:
        raise Forbidden("a key limited to one cluster cannot create clusters")
    if payload.template:
        if payload.config is not None:
            raise InvalidInput(
                "give a template (with params) or a config, not both", details={"field": "config"}
            )
        record = cluster_create_from_template(
            template_name=payload.template, params=payload.params, cluster_id=payload.id
        )
    else:
        record = services.cluster_create(
            cluster_id=payload.id, config=payload.config, params=payload.params
        )
    return Status(201, cluster_detail_out(record))


def cluster_detail_out(record: ClusterRecord) -> dict[str, Any]:
    return {**cluster_out(record), "agents": record.agents, "params": record.params}


@router.get("/clusters/{cluster_id}", response=ClusterDetailOut, summary="One cluster")
def clusters_get(request: HttpRequest, cluster_id: str) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    return cluster_detail_out(selectors.cluster_get(cluster_id=cluster_id))


@router.post(
    "/clusters/{cluster_id}/messages",
    response={201: MessageOut},
    summary="Publish one message",
    exclude_unset=True,
)
def messages_publish(request: HttpRequest, cluster_id: str, payload: MessageIn) -> Status[Any]:
    require_cluster(request, cluster_id)
    record = services.message_publish(cluster_id=cluster_id, draft=payload.draft())
    return Status(201, message_out(record))


@router.post(
    "/clusters/{cluster_id}/messages/batch",
    response={201: list[MessageOut]},
    summary="Publish messages atomically",
    exclude_unset=True,
)
def messages_publish_batch(request: HttpRequest, cluster_id: str, payload: BatchIn) -> Status[Any]:
    require_cluster(request, cluster_id)
    records = services.message_publish_batch(
        cluster_id=cluster_id, drafts=[m.draft() for m in payload.messages]
    )
    return Status(201, [message_out(r) for r in records])


@router.get(
    "/clusters/{cluster_id}/messages",
    response=MessagePageOut,
    summary="Query messages",
    exclude_unset=True,
)
def messages_query(
    request: HttpRequest, cluster_id: str, filters: Annotated[MessageQueryIn, Query()]
) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    selectors.cluster_get(cluster_id=cluster_id)
    records = selectors.message_query(
        cluster_id=cluster_id,
        topic=filters.topic,
        sender=filters.sender,
        receiver=filters.receiver,
        since=filters.since,
        until=filters.until,
        after=filters.after,
        limit=filters.limit,
        order=filters.order,
    )
    full_page = len(records) == filters.limit
    next_after = str(records[-1].sequence) if full_page and filters.order == "asc" else None
    return {"items": [message_out(r) for r in records], "next_after": next_after}


@router.get(
    "/clusters/{cluster_id}/export",
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
