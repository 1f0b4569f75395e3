"""The agents' API for context builds and strategy validation (SPEC §6.1)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status
from pydantic import ConfigDict, StrictBool, StrictInt

from context import selectors, services
from context.services import BuildOutcome
from context.services.templates import (
    TemplateRecord,
    cluster_config_validate,
    cluster_create_from_template,
    template_check,
    template_get,
    template_list,
)
from context.strategy import strategy_validate, strategy_validate_agents
from ledger.interfaces import (
    ANY_ERRORS,
    BODY_ERRORS,
    INT32_MAX,
    INT64_MAX,
    LABELS_MAX,
    READ_ERRORS,
    TIMESTAMP_MAX,
    ClusterDetailOut,
    ClusterOut,
    ClusterRecord,
    Forbidden,
    InvalidInput,
    cluster_create,
    cluster_get,
    cluster_list,
    error_responses,
    pipeline,
    require_cluster,
    scoped_cluster,
)
from ledger.records import TOPIC_PATTERN

router = Router(tags=["context"])


class ClusterCreateIn(Schema):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, description="generated as adjective-noun-NN when absent")
    template: str | None = None
    params: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    labels: dict[str, str] | None = Field(
        None,
        description=f'which runner pool serves it, e.g. {{"pool": "demo"}}: a runner that '
        f"claims with labels only gets tasks of clusters carrying every one (at most "
        f"{LABELS_MAX})",
    )


# Clusters are listed and created here rather than in the ledger's router: a cluster is usually
# made from a template, and templates belong to this app (docs/decisions/0021-app-layout.md).
@router.get(
    "/clusters",
    response={200: list[ClusterOut], **error_responses(*ANY_ERRORS)},
    summary="List clusters",
    tags=["clusters"],
)
def clusters_list(request: HttpRequest, search: str = "", state: str = "") -> list[ClusterRecord]:
    return cluster_list(search=search, state=state, only_id=scoped_cluster(request))


@router.post(
    "/clusters",
    # 404: an unknown template; 409: the id is taken.
    response={201: ClusterDetailOut, **error_responses(*BODY_ERRORS, 403, 404, 409)},
    summary="Create a cluster",
    tags=["clusters"],
)
def clusters_create(request: HttpRequest, payload: ClusterCreateIn) -> Status[ClusterRecord]:
    if scoped_cluster(request) is not None:
        raise Forbidden("a key limited to one cluster cannot create clusters")
    if payload.template:
        if payload.config is not None:
            raise InvalidInput(
                "give a template (with params) or a config, not both", details={"field": "config"}
            )
        record = cluster_create_from_template(
            template_name=payload.template,
            params=payload.params,
            cluster_id=payload.id,
            labels=payload.labels,
        )
    else:
        cluster_config_validate(payload.config)
        record = cluster_create(
            cluster_id=payload.id,
            config=payload.config,
            params=payload.params,
            labels=payload.labels,
        )
    return Status(201, record)


@router.get(
    "/clusters/{cluster_id}",
    response={200: ClusterDetailOut, **error_responses(*READ_ERRORS)},
    summary="One cluster",
    tags=["clusters"],
)
def clusters_get(request: HttpRequest, cluster_id: str) -> ClusterRecord:
    require_cluster(request, cluster_id)
    return cluster_get(cluster_id=cluster_id)


class TriggerIn(Schema):
    topic: str = Field(pattern=TOPIC_PATTERN)
    sender: str = Field(min_length=1, max_length=128)
    receiver: str | None = Field(None, min_length=1, max_length=128)
    content: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class BuildIn(Schema):
    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(min_length=1, max_length=128)
    agent: dict[str, Any] | None = Field(
        None, description="an agent config given inline instead of the cluster's"
    )
    iteration: StrictInt | None = Field(None, ge=1, le=INT32_MAX)
    triggering_message_id: str | None = Field(None, min_length=1, max_length=128)
    triggering_message: TriggerIn | None = None
    max_tokens: StrictInt | None = Field(None, ge=1, le=INT32_MAX)
    strategy: dict[str, Any] | None = Field(
        None, description="a contextStrategy overriding the agent's"
    )
    as_of_sequence: StrictInt | None = Field(
        None, ge=1, le=INT64_MAX, description="implies preview"
    )
    as_of_timestamp: StrictInt | None = Field(
        None, ge=0, le=TIMESTAMP_MAX, description="implies preview"
    )
    preview: StrictBool = False


class BuildOut(Schema):
    context: str
    metrics: dict[str, Any]
    recorded: bool
    build_id: int | None
    started_at: int | None


class BuildSummaryOut(Schema):
    id: int
    agent_id: str
    role: str
    iteration: int
    started_at: int
    trigger_message_id: str
    trigger_topic: str
    metrics: dict[str, Any]
    config_version: int = Field(1, description="the cluster's config version it was made under")


class BuildPageOut(Schema):
    items: list[BuildSummaryOut]
    next_before: int | None


class BuildQueryIn(Schema):
    agent_id: str | None = Field(None, min_length=1, max_length=128)
    before: int | None = Field(
        None, ge=1, le=INT64_MAX, description="id of the last build of the previous page"
    )
    limit: int = Field(selectors.DEFAULT_PAGE, ge=1, le=500)


class ValidationOut(Schema):
    """``{valid, errors, warnings}`` (SPEC §2.1); each problem names where it is."""

    valid: bool
    errors: list[dict[str, Any]]
    warnings: list[dict[str, Any]]


class ValidateIn(Schema):
    contextStrategy: dict[str, Any] | None = None
    agents: list[Any] | None = None
    agent_id: str | None = None


@router.post(
    "/clusters/{cluster_id}/context",
    response={200: BuildOut, **error_responses(*READ_ERRORS, *BODY_ERRORS)},
    summary="Build an agent's context",
)
def context_build(request: HttpRequest, cluster_id: str, payload: BuildIn) -> BuildOutcome:
    require_cluster(request, cluster_id)
    if payload.as_of_sequence is None and payload.as_of_timestamp is None:
        # A build "now" sees every message whose publish has returned, the snapshot included.
        pipeline.caught_up(cluster_id)
    outcome = services.context_build(
        cluster_id=cluster_id,
        agent_id=payload.agent_id,
        agent=payload.agent,
        strategy=payload.strategy,
        max_tokens=payload.max_tokens,
        iteration=payload.iteration,
        triggering_message_id=payload.triggering_message_id,
        triggering_message=(
            payload.triggering_message.model_dump(exclude_none=True)
            if payload.triggering_message is not None
            else None
        ),
        as_of_sequence=payload.as_of_sequence,
        as_of_timestamp=payload.as_of_timestamp,
        preview=payload.preview,
    )
    return outcome


@router.get(
    "/clusters/{cluster_id}/builds",
    response={200: BuildPageOut, **error_responses(*READ_ERRORS)},
    summary="Recorded builds",
)
def builds_list(
    request: HttpRequest, cluster_id: str, filters: Query[BuildQueryIn]
) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    cluster_get(cluster_id=cluster_id)
    builds = selectors.build_list(
        cluster_id=cluster_id,
        agent_id=filters.agent_id,
        before_id=filters.before,
        limit=filters.limit,
    )
    next_before = builds[-1].id if len(builds) == filters.limit else None
    return {"items": builds, "next_before": next_before}


@router.post(
    "/strategies/validate",
    response={200: ValidationOut, **error_responses(*BODY_ERRORS)},
    summary="Validate context strategies",
)
def strategies_validate(request: HttpRequest, payload: ValidateIn) -> dict[str, Any]:
    if payload.agents is not None:
        return strategy_validate_agents(payload.agents).to_dict()
    if payload.contextStrategy is not None:
        return strategy_validate(payload.contextStrategy, agent_id=payload.agent_id).to_dict()
    raise InvalidInput(
        "give {contextStrategy} or {agents: [...]}", details={"field": "contextStrategy"}
    )


class TemplateOut(Schema):
    name: str
    description: str
    params: dict[str, Any]
    builtin: bool
    agent_count: int
    version: int
    version_count: int


class TemplateDetailOut(TemplateOut):
    body: dict[str, Any]


def _scoped_template(request: HttpRequest) -> str | None:
    """For a key limited to one cluster, the template that cluster came from ("" if none)."""
    scoped = scoped_cluster(request)
    return None if scoped is None else cluster_get(cluster_id=scoped).template or ""


@router.get(
    "/templates",
    response={200: list[TemplateOut], **error_responses(*READ_ERRORS)},
    summary="List cluster templates",
)
def templates_list(request: HttpRequest) -> list[TemplateRecord]:
    # A key limited to one cluster sees only the template of its cluster.
    only = _scoped_template(request)
    return template_list() if only is None else [t for t in template_list() if t.name == only]


class TemplateValidateIn(Schema):
    template: dict[str, Any] = Field(description="a template in zeroshot's JSON shape")


# Registered before /templates/{name}: Django matches the path first, then the method.
@router.post(
    "/templates/validate",
    response={200: ValidationOut, **error_responses(*BODY_ERRORS)},
    summary="Check a cluster template without saving it",
)
def templates_validate(request: HttpRequest, payload: TemplateValidateIn) -> dict[str, Any]:
    return template_check(payload.template).to_dict()


@router.get(
    # a path, not one segment: zeroshot's built-ins are named zeroshot/<name> (decision 0120)
    "/templates/{path:name}",
    response={200: TemplateDetailOut, **error_responses(*READ_ERRORS)},
    summary="One cluster template",
)
def templates_get(request: HttpRequest, name: str) -> TemplateRecord:
    only = _scoped_template(request)
    if only is not None and name != only:
        raise Forbidden(
            "a key limited to one cluster reads only the template of that cluster",
            details={"template": name},
        )
    return template_get(name=name)
