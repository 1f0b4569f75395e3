"""Cluster operations (SPEC §7.7): what a ``CLUSTER_OPERATIONS`` message does to its cluster.

zeroshot's orchestrator (``orchestrator.js``: ``_handleOperations``, ``_validateOperationChain``,
``_buildProposedAgentConfigs``, ``_validateProposedConfig``, the ``_op*`` functions and
``_injectCompletionAgent``) is followed, with two deliberate differences the spec asks for:
the chain is executed on a copy of the config and written all at once, so an execution error
changes nothing (the cluster then fails); and a chain that fails validation leaves the cluster
running, so that a conductor may try again on ``CLUSTER_OPERATIONS_VALIDATION_FAILED``.

Planned by the trigger stage (``runs.dispatch``) while the pipeline plans, off any request
thread; nothing here writes. The outcome is the new config (or none) and the drafts to publish.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from django.conf import settings

from context.cluster_templates import (
    ZEROSHOT_PREFIX,
    TemplateError,
    template_parse,
    template_resolve,
)
from context.completion import (
    COMPLETION_DETECTOR_ID,
    GIT_PUSHER_ID,
    completion_detector,
    has_completion_handler,
)
from context.services.templates import template_check, template_get
from ledger import interfaces as ledger
from ledger.errors import NotFound
from ledger.interfaces import JSON, MessageDraft, MessageRecord, Topic
from runs.logic import deep_merge

CLUSTER_OPERATIONS: Final = "CLUSTER_OPERATIONS"
OPERATIONS_SUCCESS: Final = "CLUSTER_OPERATIONS_SUCCESS"
OPERATIONS_FAILED: Final = "CLUSTER_OPERATIONS_FAILED"
OPERATIONS_VALIDATION_FAILED: Final = "CLUSTER_OPERATIONS_VALIDATION_FAILED"
SENDER: Final = "orchestrator"
# zeroshot's VALID_OPERATIONS (orchestrator.js).
ACTIONS: Final = ("add_agents", "remove_agents", "update_agent", "publish", "load_config")
# Bounds of one chain (docs/decisions/0121-cluster-operations.md): far past any conductor's.
OPERATIONS_MAX: Final = 50
AGENTS_MAX: Final = 100
# A cluster's config after a chain, serialised; and the versions one cluster may make.
CONFIG_MAX_BYTES: Final = 4 * 1024 * 1024
VERSIONS_MAX: Final = 200
# zeroshot's TEMPLATE_NAME_PATTERN (template-resolver.js): a name, never a path.
_TEMPLATE_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_ERRORS_SHOWN: Final = 50

TemplateLookup = Callable[[str], Mapping[str, JSON]]


@dataclass
class OperationsOutcome:
    """What a chain leads to: the new config when it succeeded, and the messages to publish
    (in order: the chain's own ``publish`` operations, then its verdict)."""

    config: dict[str, JSON] | None = None
    diff: list[JSON] = field(default_factory=list)
    drafts: list[MessageDraft] = field(default_factory=list)
    fails_cluster: bool = False


class _ChainError(Exception):
    """An operation that cannot be executed: the chain fails and the cluster with it."""


class _Invalid(Exception):
    """The chain cannot be accepted as written: ``CLUSTER_OPERATIONS_VALIDATION_FAILED``."""

    def __init__(self, errors: list[str], warnings: list[str] | None = None) -> None:
        super().__init__(errors[0] if errors else "invalid")
        self.errors = errors
        self.warnings = warnings or []


def operations_of(message: MessageRecord) -> list[JSON] | None:
    """The message's operations (an array, or its JSON text), or None when it has none: then
    zeroshot ignores the message (``_registerClusterOperationsHandler``)."""
    content = message.content if isinstance(message.content, Mapping) else {}
    data = content.get("data")
    operations = data.get("operations") if isinstance(data, Mapping) else None
    if isinstance(operations, str):
        try:
            operations = json.loads(operations)
            # Text holds what a stored value may not: JSON nested past the ledger's depth.
            ledger.json_encode_checked(operations, max_depth=settings.LEDGER_MAX_JSON_DEPTH)
        except (ValueError, RecursionError, ledger.JsonValueError):
            return None
    return operations if isinstance(operations, list) else None


def operations_plan(
    message: MessageRecord,
    *,
    config: Mapping[str, JSON],
    template: str | None,
    version: int = 1,
    lookup: TemplateLookup | None = None,
) -> OperationsOutcome | None:
    """Validate, then execute on a copy of ``config``, the operations of ``message``.

    ``template`` is the name of the cluster's template: a cluster made from a ``zeroshot/``
    template loads zeroshot's templates by their zeroshot names. ``lookup`` (a template body by
    name, ``NotFound`` when none) defaults to the template store.
    """
    operations = operations_of(message)
    if operations is None:
        return None
    find = lookup or _store_lookup(template)
    sender = message.sender
    try:
        _chain_check(operations)
        if version >= VERSIONS_MAX:
            raise _Invalid([f"the cluster's config has {version} versions; at most {VERSIONS_MAX}"])
        proposed = _proposed(config, operations, find)
        warnings = _proposed_check(proposed)
    except _Invalid as invalid:
        return OperationsOutcome(drafts=[_validation_failed(invalid, operations)])
    try:
        new_config, published, replaced = _execute(config, operations, sender=sender, find=find)
    except (_ChainError, _Invalid) as error:
        return OperationsOutcome(drafts=_failed(str(error), operations), fails_cluster=True)
    del warnings  # zeroshot logs them and proceeds
    agents = new_config.get("agents")
    count = len(agents) if isinstance(agents, list) else 0
    success = MessageDraft(
        topic=OPERATIONS_SUCCESS,
        sender=SENDER,
        content={
            "text": f"Executed {len(operations)} operation(s)",
            "data": {"operationCount": len(operations), "agentCount": count},
        },
    )
    return OperationsOutcome(
        config=new_config,
        diff=config_diff(config, new_config, replaced=replaced),
        drafts=[*published, success],
    )


def config_diff(
    old: Mapping[str, JSON], new: Mapping[str, JSON], *, replaced: set[str] | None = None
) -> list[JSON]:
    """Agent by agent, what a change did: ``[{agent, change}]``, the change ``added``,
    ``removed``, ``replaced`` (added again under its id: a new agent, zeroshot stops the old
    one) or ``changed`` (``update_agent``)."""
    before = {a.get("id"): a for a in _agents(old)}
    after = {a.get("id"): a for a in _agents(new)}
    diff: list[JSON] = []
    for agent_id in before:
        if agent_id not in after:
            diff.append({"agent": agent_id, "change": "removed"})
    for agent_id, agent in after.items():
        if agent_id not in before:
            diff.append({"agent": agent_id, "change": "added"})
        elif agent_id in (replaced or set()):
            diff.append({"agent": agent_id, "change": "replaced"})
        elif _canonical(before[agent_id]) != _canonical(agent):
            diff.append({"agent": agent_id, "change": "changed"})
    return diff


# --- validation ----------------------------------------------------------------------------------


def _chain_check(operations: Sequence[JSON]) -> None:
    """zeroshot's ``_validateOperationChain``: each operation names a known action."""
    errors: list[str] = []
    if not operations:
        errors.append("the operations array is empty")
    if len(operations) > OPERATIONS_MAX:
        errors.append(f"{len(operations)} operations; at most {OPERATIONS_MAX} in one chain")
    for index, op in enumerate(operations[:OPERATIONS_MAX]):
        action = op.get("action") if isinstance(op, Mapping) else None
        if not action:
            errors.append(f"Operation {index}: missing 'action' field")
        elif action not in ACTIONS:
            shown = json.dumps(action, ensure_ascii=False)[:80]
            errors.append(f"Operation {index}: unknown action {shown}. Valid: {', '.join(ACTIONS)}")
    if errors:
        raise _Invalid(errors)


def _proposed(
    config: Mapping[str, JSON], operations: Sequence[JSON], find: TemplateLookup
) -> list[dict[str, JSON]]:
    """zeroshot's ``_buildProposedAgentConfigs``: the agents after the chain, before it runs."""
    agents = [copy.deepcopy(a) for a in _agents(config)]

    def put(agent: JSON) -> None:
        if not isinstance(agent, Mapping):
            return
        at = next((i for i, a in enumerate(agents) if a.get("id") == agent.get("id")), None)
        if at is None:
            agents.append(copy.deepcopy(dict(agent)))
        else:
            agents[at] = copy.deepcopy(dict(agent))

    for op in operations:
        if not isinstance(op, Mapping):
            continue
        action = op.get("action")
        if action == "add_agents" and isinstance(op.get("agents"), list):
            for agent in op["agents"]:
                put(agent)
        elif action == "load_config":
            for agent in _loaded(op.get("config"), find):
                put(agent)
        elif action == "remove_agents" and isinstance(op.get("agentIds"), list):
            agents = [a for a in agents if a.get("id") not in op["agentIds"]]
        elif action == "update_agent" and isinstance(op.get("updates"), Mapping):
            for index, agent in enumerate(agents):
                if agent.get("id") == op.get("agentId"):
                    agents[index] = deep_merge(agent, op["updates"])
    return agents


def _proposed_check(agents: list[dict[str, JSON]]) -> list[str]:
    """zeroshot's ``_validateProposedConfig``: the proposed agents as one config pass template
    validation, with zeroshot's stage-1 producer (``_injectCriticalValidationResultProducer``)
    and synthetic completion handler (``_prepareValidationAgentConfigs``) where it adds them."""
    if len(agents) > AGENTS_MAX:
        raise _Invalid([f"the chain leaves {len(agents)} agents; at most {AGENTS_MAX}"])
    size = len(json.dumps(agents, ensure_ascii=False).encode())
    if size > CONFIG_MAX_BYTES:
        raise _Invalid([f"the chain leaves a config of {size} bytes; at most {CONFIG_MAX_BYTES}"])
    checked = copy.deepcopy(agents)
    ids = {a.get("id") for a in checked}
    has_validator = any(a.get("role") == "validator" for a in checked)
    if "meta-coordinator" in ids and not has_validator and _SIMULATOR not in ids:
        checked.append(_validation_result_simulator())
    if not has_completion_handler(checked):
        checked.append(_synthetic_completion_handler())
    body: dict[str, JSON] = {"name": "proposed cluster config", "agents": checked}
    check = template_check(body)
    warnings = [str(w.get("message", "")) for w in check.warnings]
    if not check.valid:
        raise _Invalid([str(e.get("message", "")) for e in check.errors], warnings)
    return warnings


# zeroshot names these two "__validation-result-simulator" and "__completion-validator"; an agent
# id here starts with a letter or digit. They are only ever validated, never run.
_SIMULATOR: Final = "synthetic-validation-result-simulator"


def _validation_result_simulator() -> dict[str, JSON]:
    return {
        "id": _SIMULATOR,
        "role": "validator",
        # Our validation asks every task-running agent for a prompt; this one never runs.
        "prompt": "Stands for the stage-1 validators loaded later.",
        "triggers": [{"topic": "IMPLEMENTATION_READY", "action": "execute_task"}],
        "hooks": {
            "onComplete": {
                "action": "publish_message",
                "config": {
                    "topic": "VALIDATION_RESULT",
                    "content": {"data": {"approved": True, "errors": [], "criteriaResults": []}},
                },
            }
        },
    }


def _synthetic_completion_handler() -> dict[str, JSON]:
    return {
        "id": "synthetic-completion-validator",
        "role": "orchestrator",
        "triggers": [{"topic": "VALIDATION_RESULT", "action": "stop_cluster"}],
    }


# --- execution -----------------------------------------------------------------------------------


def _execute(
    config: Mapping[str, JSON],
    operations: Sequence[JSON],
    *,
    sender: str,
    find: TemplateLookup,
) -> tuple[dict[str, JSON], list[MessageDraft], set[str]]:
    """zeroshot's ``_executeOperations`` on a copy: the new config, the published drafts and
    the ids of the agents added again (replaced)."""
    new_config = copy.deepcopy(dict(config))
    agents = [copy.deepcopy(a) for a in _agents(config)]
    published: list[MessageDraft] = []
    replaced: set[str] = set()
    for index, op in enumerate(operations):
        assert isinstance(op, Mapping)  # _chain_check
        action = op["action"]
        where = f"operation {index} ({action})"
        if action == "add_agents":
            replaced |= _add(agents, op.get("agents"), where=where)
        elif action == "remove_agents":
            ids = op.get("agentIds")
            if not isinstance(ids, list):
                raise _ChainError(f"{where}: remove_agents operation missing agentIds array")
            agents = [a for a in agents if a.get("id") not in ids]
        elif action == "update_agent":
            _update(agents, op, where=where)
        elif action == "publish":
            published.append(_publish(op, sender=sender, where=where))
        elif action == "load_config":
            replaced |= _add(agents, _loaded(op.get("config"), find), where=where)
            # Templates hold no completion agent: zeroshot's orchestrator adds its own.
            if not any(a.get("id") in (COMPLETION_DETECTOR_ID, GIT_PUSHER_ID) for a in agents):
                agents.append(completion_detector())
    new_config["agents"] = agents
    return new_config, published, replaced


def _add(agents: list[dict[str, JSON]], added: JSON, *, where: str) -> set[str]:
    """zeroshot's ``_opAddAgents``: an agent with a known id replaces it entirely (the ids of
    those replaced are returned)."""
    if not isinstance(added, list):
        raise _ChainError(f"{where}: add_agents operation missing agents array")
    replaced: set[str] = set()
    for agent in added:
        if not isinstance(agent, Mapping) or not agent.get("id"):
            raise _ChainError(f"{where}: Agent config missing required field: id")
        if any(a.get("id") == agent["id"] for a in agents):
            replaced.add(str(agent["id"]))
        agents[:] = [a for a in agents if a.get("id") != agent["id"]]
        agents.append(copy.deepcopy(dict(agent)))
    return replaced


def _update(agents: list[dict[str, JSON]], op: Mapping[str, JSON], *, where: str) -> None:
    """zeroshot's ``_opUpdateAgent``, deep-merged (SPEC §7.7)."""
    agent_id, updates = op.get("agentId"), op.get("updates")
    if not agent_id:
        raise _ChainError(f"{where}: update_agent operation missing agentId")
    if not isinstance(updates, Mapping):
        raise _ChainError(f"{where}: update_agent operation missing updates object")
    for index, agent in enumerate(agents):
        if agent.get("id") == agent_id:
            agents[index] = deep_merge(agent, updates)
            return
    raise _ChainError(f"{where}: update_agent: Agent {agent_id} not found")


def _publish(op: Mapping[str, JSON], *, sender: str, where: str) -> MessageDraft:
    """zeroshot's ``_opPublish``; the sender is always the operations' own sender."""
    topic = op.get("topic")
    if not topic:
        raise _ChainError(f"{where}: publish operation missing topic")
    content = op.get("content")
    metadata = op.get("metadata")
    receiver = op.get("receiver")
    draft = MessageDraft(
        topic=topic,  # checked just below
        sender=sender,
        receiver=receiver if isinstance(receiver, str) and receiver else "broadcast",
        content=ledger.json_storable(content) if isinstance(content, Mapping) else {},
        metadata=ledger.json_storable(metadata) if isinstance(metadata, Mapping) else None,
    )
    try:
        ledger.drafts_check([draft], single=True)
    except ledger.ServiceError as error:
        raise _ChainError(f"{where}: the message is invalid: {error.message}") from None
    return draft


def _loaded(reference: JSON, find: TemplateLookup) -> list[dict[str, JSON]]:
    """zeroshot's ``resolveConfigReference``: ``NAME`` or ``{base, params}``, resolved with
    zeroshot's parameter substitution and conditional blocks (``context.cluster_templates``).
    Params the template does not declare are ignored, as zeroshot's resolver ignores them."""
    if isinstance(reference, str):
        name, params = reference, {}
    elif isinstance(reference, Mapping) and "base" in reference:
        name = reference.get("base")  # type: ignore[assignment]
        given = reference.get("params")
        params = dict(given) if isinstance(given, Mapping) else {}
    else:
        raise _Invalid(["load_config: expected config: NAME or {base, params}"])
    if not isinstance(name, str) or not _TEMPLATE_NAME.match(name):
        shown = json.dumps(name, ensure_ascii=False)[:80]
        raise _Invalid(
            [f"load_config: invalid template name {shown}: use only letters, numbers, - and _"]
        )
    try:
        body = find(name)
        spec = template_parse(body)
        declared = {p.name for p in spec.params}
        resolved = template_resolve(body, {k: v for k, v in params.items() if k in declared})
    except NotFound:
        raise _Invalid([f"load_config: template {name!r} does not exist"]) from None
    except TemplateError as error:
        raise _Invalid([f"load_config {name!r}: {error.message}"]) from None
    agents = resolved.get("agents")
    if not isinstance(agents, list):
        raise _Invalid([f"load_config {name!r}: Config has no agents array"])
    return [dict(a) for a in agents if isinstance(a, Mapping)]


def _store_lookup(template: str | None) -> TemplateLookup:
    """Template bodies from the store; a cluster of a ``zeroshot/`` template finds zeroshot's
    templates by the names zeroshot gives them (docs/decisions/0120)."""
    prefix = ZEROSHOT_PREFIX if (template or "").startswith(ZEROSHOT_PREFIX) else ""

    def find(name: str) -> Mapping[str, JSON]:
        if prefix:
            try:
                return template_get(name=prefix + name).body
            except NotFound:
                pass
        return template_get(name=name).body

    return find


# --- verdicts ------------------------------------------------------------------------------------


def _validation_failed(invalid: _Invalid, operations: Sequence[JSON]) -> MessageDraft:
    return MessageDraft(
        topic=OPERATIONS_VALIDATION_FAILED,
        sender=SENDER,
        content={
            "text": "Operation chain would create invalid cluster configuration",
            "data": {
                "errors": [_short(e) for e in invalid.errors[:_ERRORS_SHOWN]],
                "warnings": [_short(w) for w in invalid.warnings[:_ERRORS_SHOWN]],
                "operations": ledger.json_storable(list(operations)),
            },
        },
    )


def _failed(error: str, operations: Sequence[JSON]) -> list[MessageDraft]:
    """zeroshot's catch of ``_handleOperations``: the chain failed, and the cluster with it."""
    error = _short(error)
    return [
        MessageDraft(
            topic=OPERATIONS_FAILED,
            sender=SENDER,
            content={
                "text": f"Operation chain failed: {error}",
                "data": {"error": error, "operations": ledger.json_storable(list(operations))},
            },
        ),
        MessageDraft(
            topic=Topic.CLUSTER_FAILED,
            sender=SENDER,
            content={
                "text": f"Operation chain failed: {error}",
                "data": {"reason": "cluster_operations_failed"},
            },
        ),
    ]


def _short(text: str) -> str:
    return ledger.text_storable(text, max_chars=2_000)


def _agents(config: Mapping[str, JSON]) -> list[dict[str, JSON]]:
    agents = config.get("agents")
    return [dict(a) for a in agents if isinstance(a, Mapping)] if isinstance(agents, list) else []


def _canonical(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
