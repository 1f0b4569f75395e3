"""The pure core of orchestration: zeroshot's logic scripts in a sandbox, and hook configs.

No Django and no database: scripts read the ledger from a ``LedgerView`` that the server keeps
per cluster, and every failure comes back as a ``LogicError`` value for the caller to publish as
``AGENT_ERROR``. Layout: ``records`` (the values), ``view`` (the ledger view), ``engine`` (the
QuickJS sandbox and its limits; ``prelude.js`` is the scope scripts see), ``scripts`` (trigger
logic, hook logic, transforms), ``hooks`` (merge, placeholders, refused actions) and ``results``
(an agent's result and its ``jsonSchema``).
"""

from __future__ import annotations

from runs.logic.engine import MEMORY_LIMIT_BYTES, TIME_LIMIT_S, TRANSFORM_TIME_LIMIT_S
from runs.logic.hooks import (
    ActionsCheck,
    deep_merge,
    operations_problem,
    substitute,
    template_actions_check,
    transform_missing_fields,
)
from runs.logic.records import (
    DEFAULT_STOP_REASON,
    ERROR_TEXT_MAX,
    JSON,
    AgentInfo,
    ClusterInfo,
    ErrorKind,
    LogicError,
    ParsedResult,
    SchemaIssue,
    TransformMessage,
    TriggerOutcome,
)
from runs.logic.results import result_parse
from runs.logic.scripts import hook_logic_evaluate, transform_evaluate, trigger_logic_evaluate
from runs.logic.view import (
    OUTPUT_MAX_BYTES,
    OUTPUT_MAX_MESSAGES,
    VIEW_MAX_BYTES,
    VIEW_MAX_MESSAGES,
    LedgerView,
    script_message,
)

__all__ = [
    "DEFAULT_STOP_REASON",
    "ERROR_TEXT_MAX",
    "JSON",
    "MEMORY_LIMIT_BYTES",
    "OUTPUT_MAX_BYTES",
    "OUTPUT_MAX_MESSAGES",
    "TIME_LIMIT_S",
    "TRANSFORM_TIME_LIMIT_S",
    "VIEW_MAX_BYTES",
    "VIEW_MAX_MESSAGES",
    "ActionsCheck",
    "AgentInfo",
    "ClusterInfo",
    "ErrorKind",
    "LedgerView",
    "LogicError",
    "ParsedResult",
    "SchemaIssue",
    "TransformMessage",
    "TriggerOutcome",
    "deep_merge",
    "hook_logic_evaluate",
    "operations_problem",
    "result_parse",
    "script_message",
    "substitute",
    "template_actions_check",
    "transform_evaluate",
    "transform_missing_fields",
    "trigger_logic_evaluate",
]
