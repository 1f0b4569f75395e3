"""Hook configs without a database (SPEC §7.5): merging, placeholders, and the actions we refuse.

``hooks.onComplete`` with ``action: "publish_message"`` publishes ``config`` after its ``logic``
patch is deep-merged in (``deep_merge``) and its placeholders are replaced (``substitute``).
``template_actions_check`` tells a template author, before anything runs, which hooks the server
will never execute.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from context.cluster_templates.actions import ActionsCheck, template_actions_check
from runs.logic.records import JSON, LogicError

__all__ = [
    "ActionsCheck",
    "deep_merge",
    "operations_problem",
    "substitute",
    "template_actions_check",
    "transform_missing_fields",
]

# {{result…}}, {{cluster…}}, {{iteration…}} and {{error…}} belong to us; any other {{…}} is text.
_PLACEHOLDER: Final = re.compile(r"\{\{(result|cluster|iteration|error)((?:\.[^{}.\s]+)*)\}\}")
_MISSING: Final = object()


def deep_merge(config: Mapping[str, JSON], patch: Mapping[str, JSON]) -> dict[str, JSON]:
    """``config`` with ``patch`` over it: objects merge key by key, anything else replaces."""
    merged = copy.deepcopy(dict(config))
    for key, value in patch.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True, slots=True)
class _Values:
    result: Mapping[str, JSON] | None
    output_text: str
    cluster_id: str
    cluster_created_at: int
    iteration: int
    error_message: str | None

    def lookup(self, family: str, path: str) -> JSON:
        """The value a placeholder names, or ``_MISSING`` when it names nothing we know."""
        names = path.split(".")[1:] if path else []
        # zeroshot substitutes these three into the config's JSON text inside its quotes, so
        # "{{iteration}}" and "{{cluster.createdAt}}" stay strings, and "{{error.message}}" is
        # "" when there is no error (src/agent/agent-hook-executor.js, substituteTemplate).
        if family == "iteration":
            return str(self.iteration) if not names else _MISSING
        if family == "cluster":
            known: dict[str, JSON] = {
                "id": self.cluster_id,
                "createdAt": str(self.cluster_created_at),
            }
            return known.get(names[0], _MISSING) if len(names) == 1 else _MISSING
        if family == "error":
            return (self.error_message or "") if names == ["message"] else _MISSING
        if names == ["output"]:
            return self.output_text
        if not names or self.result is None:
            return _MISSING
        return _field(self.result, names)


def substitute(
    config: Mapping[str, JSON],
    *,
    result: Mapping[str, JSON] | None,
    output_text: str,
    cluster_id: str,
    cluster_created_at: int,
    iteration: int,
    error_message: str | None,
) -> dict[str, JSON] | LogicError:
    """Replace the placeholders of a hook ``config``, or say which ones cannot be resolved.

    A string that is exactly one placeholder becomes its value with its JSON type; inside a
    longer string a placeholder becomes the value's text (objects and arrays as JSON). A missing
    result field is ``null``; a placeholder with no value at all (``{{cluster.name}}``, a result
    field when the agent returned no JSON) fails.
    """
    values = _Values(
        result=result,
        output_text=output_text,
        cluster_id=cluster_id,
        cluster_created_at=cluster_created_at,
        iteration=iteration,
        error_message=error_message,
    )
    unresolved: list[str] = []
    replaced = _replace(dict(config), values, unresolved)
    if unresolved:
        names = ", ".join(dict.fromkeys(unresolved))
        return LogicError("placeholder", f"the hook config has unresolved placeholders: {names}")
    substituted: dict[str, JSON] = replaced
    return substituted


def _replace(value: JSON, values: _Values, unresolved: list[str]) -> JSON:
    if isinstance(value, str):
        return _replace_text(value, values, unresolved)
    if isinstance(value, Mapping):
        return {key: _replace(item, values, unresolved) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace(item, values, unresolved) for item in value]
    return value


def _replace_text(text: str, values: _Values, unresolved: list[str]) -> JSON:
    whole = _PLACEHOLDER.fullmatch(text)
    if whole:
        found = values.lookup(whole.group(1), whole.group(2))
        if found is _MISSING:
            unresolved.append(text)
            return text
        return copy.deepcopy(found)

    def one(match: re.Match[str]) -> str:
        found = values.lookup(match.group(1), match.group(2))
        if found is _MISSING:
            unresolved.append(match.group(0))
            return match.group(0)
        return _as_text(found)

    # One pass: text that a value brings in is never read for placeholders itself.
    return _PLACEHOLDER.sub(one, text)


def _field(result: Mapping[str, JSON], names: list[str]) -> JSON:
    current: JSON = result
    for name in names:
        if isinstance(current, Mapping):
            current = current.get(name)
        elif isinstance(current, list) and name.isdigit() and int(name) < len(current):
            current = current[int(name)]
        else:
            return None
    return current


def _as_text(value: JSON) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The result fields a transform script reads, as zeroshot finds them (agent-hook-executor.js,
# getAccessedFields): ``result.NAME`` anywhere in the script's text.
_RESULT_FIELD: Final = re.compile(r"result\.([a-zA-Z_]+)")


def transform_missing_fields(script: str, result: Mapping[str, JSON] | None) -> list[str]:
    """The ``result.X`` fields a transform reads that the result lacks: zeroshot refuses to run
    such a transform (agent-hook-executor.js, parseTransformResultData). With no result object,
    every field it reads is missing."""
    accessed = dict.fromkeys(_RESULT_FIELD.findall(script))
    if result is None:
        return list(accessed)
    return [name for name in accessed if name not in result]


def operations_problem(message: Mapping[str, JSON]) -> str | None:
    """Why a hook's ``CLUSTER_OPERATIONS`` message cannot be published, or None: zeroshot fails
    the hook when its ``content.data.operations`` is not a non-empty array of ``{action}``
    (agent-hook-executor.js, validateClusterOperationsResult)."""
    if message.get("topic") != "CLUSTER_OPERATIONS":
        return None
    content = message.get("content")
    data = content.get("data") if isinstance(content, Mapping) else None
    operations = data.get("operations") if isinstance(data, Mapping) else None
    if operations is None:
        return "the CLUSTER_OPERATIONS message has no operations array"
    if not isinstance(operations, list):
        return "CLUSTER_OPERATIONS.operations must be an array"
    if not operations:
        return "CLUSTER_OPERATIONS.operations is empty: there is nothing to execute"
    for index, operation in enumerate(operations):
        if not isinstance(operation, Mapping) or not operation.get("action"):
            return f"CLUSTER_OPERATIONS.operations[{index}] has no action"
    return None
