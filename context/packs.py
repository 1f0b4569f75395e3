"""The packs a prompt is assembled from, and their exact texts (SPEC §3.1, §3.2, §3.5)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from context.budget import Pack
from context.guidance import GUIDANCE_PACK
from context.jsformat import data_is_written, iso_ms, js_json
from context.strategy import ContextStrategy, SourceSpec
from ledger.errors import InvalidInput
from ledger.records import MessageRecord

__all__ = [
    "DEFAULT_RULES",
    "Pack",
    "build_packs",
    "prompt_text",
    "render_header",
    "render_instructions",
    "render_output_schema",
    "render_source",
    "render_trigger",
    "schema_example",
    "source_pack",
    "validator_skip_hints",
]

DEFAULT_RULES: Final = (
    "## Ground rules\n"
    "\n"
    "You run unattended, as one step of an automated pipeline. No person is watching this run:"
    " a question you ask will never be answered, and waiting for one stalls the whole cluster.\n"
    "\n"
    "- Never ask for input, approval or confirmation, and never wait for a reply.\n"
    "- Decide on your own from your instructions and the ledger messages below. When a choice"
    " is open, take the option that keeps the work correct and the change small.\n"
    "- If something blocks you, say what and why in your result instead of stopping.\n"
    "- Report your result only through the output you are asked for.\n"
    "\n"
)

_MAX_SCHEMA_DEPTH: Final = 12
VALIDATOR_ROLE: Final = "validator"
CANNOT_VALIDATE: Final = "CANNOT_VALIDATE"


# --- pack texts -------------------------------------------------------------------------------


def render_source(messages: Sequence[MessageRecord], *, topic: str | None = None) -> str:
    """Render a source's selected messages, oldest first; the empty string when there are none."""
    if not messages:
        return ""
    parts = [f"\n## Messages from topic: {topic or messages[0].topic}\n\n"]
    for message in messages:
        parts.append(f"[{iso_ms(message.timestamp)}] {message.sender}:\n")
        if message.text:
            parts.append(f"{message.text}\n")
        if data_is_written(message.data):
            parts.append(f"Data: {js_json(message.data)}\n")
        parts.append("\n")
    return "".join(parts)


def render_trigger(message: MessageRecord) -> str:
    """Render the triggering message block; its data is never rendered."""
    text = f"\n## Triggering Message\n\nTopic: {message.topic}\nSender: {message.sender}\n"
    if message.text:
        text += f"\n{message.text}\n"
    return text


def render_header(agent_id: str, role: str, iteration: int, rules_text: str = DEFAULT_RULES) -> str:
    """Render the agent's identity followed by the rules of unattended work."""
    header = f'# Agent "{agent_id}"\n\nRole: {role}\nIteration: {iteration}\n\n'
    if rules_text:
        header += rules_text.rstrip("\n") + "\n\n"
    return header


def prompt_text(prompt: Any, *, iteration: int = 1) -> str | None:
    """Return the prompt of an agent config for one iteration.

    A string; an object's ``system`` string; or zeroshot's ``{initial, subsequent}``: the
    ``initial`` prompt on the first iteration, ``subsequent`` (else ``initial``) after it.
    """
    if prompt is None or prompt == "":
        return None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping) and isinstance(prompt.get("system"), str):
        return str(prompt["system"]) or None
    if isinstance(prompt, Mapping) and isinstance(prompt.get("initial"), str):
        later = prompt.get("subsequent")
        if iteration > 1 and isinstance(later, str):
            return later or None
        return str(prompt["initial"]) or None
    raise InvalidInput(
        "an agent prompt must be a string, an object with a string `system`, or an object "
        "with string `initial` (and `subsequent`) prompts",
        details={"prompt": js_json(prompt)[:200]},
        code="invalid_prompt",
    )


def render_instructions(prompt: Any, *, iteration: int = 1) -> str:
    """Render ``## Instructions`` with the agent's prompt; the empty string when it has none."""
    text = prompt_text(prompt, iteration=iteration)
    return f"## Instructions\n\n{text}\n\n" if text else ""


def render_output_schema(schema: Mapping[str, Any]) -> str:
    """Render the agent's output JSON schema and an example object derived from it.

    An agent's schema is the same at every one of its builds, and its text is the costliest of
    the fixed packs: the text is kept per schema, keyed by the schema's JSON (which differs for
    any two JSON values that render differently).
    """
    try:
        key = json.dumps(schema)
    except (TypeError, ValueError):
        return _output_schema_text(schema)
    text = _SCHEMA_TEXTS.get(key)
    if text is None:
        text = _output_schema_text(schema)
        if len(_SCHEMA_TEXTS) >= _SCHEMA_TEXTS_MAX:
            _SCHEMA_TEXTS.clear()
        _SCHEMA_TEXTS[key] = text
    return text


_SCHEMA_TEXTS: dict[str, str] = {}
_SCHEMA_TEXTS_MAX = 256


def _output_schema_text(schema: Mapping[str, Any]) -> str:
    return (
        "## Output format\n\n"
        "Reply with one JSON object and nothing else, no text before or after it."
        " It must follow this JSON schema:\n\n"
        f"```json\n{js_json(schema)}\n```\n\n"
        "An example of the shape (the values are placeholders):\n\n"
        f"```json\n{js_json(schema_example(schema))}\n```\n\n"
        "Use enum values exactly as written, and include every required field.\n\n"
    )


def schema_example(schema: Any, depth: int = 0) -> Any:
    """Derive a small, deterministic example value from a JSON schema."""
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for combinator in ("oneOf", "anyOf", "allOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            return schema_example(options[0], depth + 1)
    kind = _schema_type(schema)
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        return {str(key): schema_example(item, depth + 1) for key, item in properties.items()}
    if kind == "array":
        items = schema.get("items")
        return [schema_example(items, depth + 1)] if isinstance(items, Mapping) else []
    return {"string": "...", "integer": 0, "number": 0, "boolean": False}.get(kind or "")


def _schema_type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        # ["string", "null"] describes a nullable string: show the string.
        kind = next((item for item in kind if item != "null"), None)
    if isinstance(kind, str):
        return kind
    if isinstance(schema.get("properties"), Mapping):
        return "object"
    if isinstance(schema.get("items"), Mapping):
        return "array"
    return None


def validator_skip_hints(validation_results: Sequence[MessageRecord]) -> str:
    """Render the criteria earlier validations could not check (SPEC §3.5); "" when none."""
    reasons: dict[str, str] = {}
    for message in validation_results:
        data = message.data
        results = data.get("criteriaResults") if isinstance(data, Mapping) else None
        if not isinstance(results, list):
            continue
        for result in results:
            if not isinstance(result, Mapping) or result.get("status") != CANNOT_VALIDATE:
                continue
            criterion = result.get("id")
            if not isinstance(criterion, str) or not criterion or criterion in reasons:
                continue
            reason = result.get("reason")
            reasons[criterion] = (
                reason if isinstance(reason, str) and reason else ("No reason provided")
            )
    if not reasons:
        return ""
    lines = "".join(f"- **{criterion}**: {reason}\n" for criterion, reason in reasons.items())
    return (
        "\n## Criteria that cannot be validated here (skip them)\n\n"
        "Earlier validation runs found that this environment cannot check the criteria below,"
        " and that has not changed. Do not try to verify them again: report each one as"
        " CANNOT_VALIDATE with the same reason.\n\n"
        f"{lines}\n"
    )


# --- the pack list ----------------------------------------------------------------------------


def source_pack(
    source: SourceSpec,
    *,
    full_messages: Sequence[MessageRecord],
    compact_messages: Sequence[MessageRecord],
    order: int,
) -> Pack:
    """Build the pack of one context source, with its full and compact variants."""
    return Pack(
        id=source.pack_id,
        section="sources",
        priority=source.priority,
        order=order,
        full=render_source(full_messages, topic=source.topic),
        compact=render_source(compact_messages, topic=source.topic),
        required=source.priority == "required",
    )


def build_packs(
    *,
    agent: Mapping[str, Any],
    iteration: int,
    strategy: ContextStrategy,
    source_messages: Sequence[tuple[Sequence[MessageRecord], Sequence[MessageRecord]]],
    trigger: MessageRecord,
    validation_results: Sequence[MessageRecord] = (),
    rules_text: str = DEFAULT_RULES,
    queued_guidance: str = "",
) -> list[Pack]:
    """Build the ordered packs of one prompt (SPEC §3.1).

    ``queued_guidance`` is the agent's ``## Guidance (Queued)`` section (SPEC §7.8,
    ``context.guidance``): a required pack right after the instructions, where zeroshot puts it
    (``src/agent/agent-context-packs.ts``), left out when empty.

    ``source_messages[i]`` holds the full and the compact selection of ``strategy.sources[i]``.
    As in the reference, a fixed pack whose text is empty (no prompt, no skip hints) is left out.
    """
    if len(source_messages) != len(strategy.sources):
        raise ValueError(
            f"{len(strategy.sources)} sources but {len(source_messages)} selections were given"
        )
    agent_id = str(agent.get("id") or "")
    role = str(agent.get("role") or "")
    packs: list[Pack] = []

    def add_fixed(pack_id: str, text: str, *, preserve: bool = False) -> None:
        if text:
            packs.append(
                Pack(
                    id=pack_id,
                    section=pack_id,
                    priority="required",
                    order=len(packs),
                    full=text,
                    compact=None,
                    required=True,
                    preserve=preserve,
                )
            )

    add_fixed("header", render_header(agent_id, role, iteration, rules_text))
    add_fixed("instructions", render_instructions(agent.get("prompt"), iteration=iteration))
    add_fixed(GUIDANCE_PACK, queued_guidance)
    schema = agent.get("jsonSchema")
    if isinstance(schema, Mapping):
        add_fixed("outputSchema", render_output_schema(schema))
    for source, (full, compact) in zip(strategy.sources, source_messages, strict=True):
        packs.append(
            source_pack(source, full_messages=full, compact_messages=compact, order=len(packs))
        )
    if role == VALIDATOR_ROLE:
        add_fixed("validatorSkip", validator_skip_hints(validation_results))
    add_fixed("triggeringMessage", render_trigger(trigger), preserve=True)
    return packs
