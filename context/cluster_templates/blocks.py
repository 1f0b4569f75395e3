"""``{{#if cond}}…{{else}}…{{/if}}`` blocks in template strings: kept, dropped or rejected."""

from __future__ import annotations

import re

from context.cluster_templates.conditions import evaluate, parse_condition
from context.cluster_templates.spec import JSON, TemplateError

_IF_TAG = re.compile(r"^if(?:\s+(.*))?$", re.DOTALL)
# Block tags in Handlebars style: {{#name …}}, {{/name}}, {{else …}}, {{^name}}.
_BLOCK_TAG = re.compile(r"\{\{\s*([#/^]|else\b)\s*([^}]*?)\s*\}\}")


def render_blocks(text: str, values: dict[str, JSON] | None, params: set[str]) -> str:
    """Keep or drop ``{{#if}}`` blocks (nested, with ``{{else}}``); ``values=None`` only checks.

    Other block helpers (``#each``, ``#unless``, ``else if``, ``^``) are rejected by name.
    """
    # Each frame: [output parts, condition value, in_else]; the root frame is always "true".
    stack: list[tuple[list[str], bool, bool]] = [([], True, False)]
    position = 0
    for match in _BLOCK_TAG.finditer(text):
        sigil, rest = match.group(1), match.group(2)
        parts, active, in_else = stack[-1]
        visible = _visible(stack)
        if visible:
            parts.append(text[position : match.start()])
        position = match.end()
        if_tag = _IF_TAG.match(rest) if sigil == "#" else None
        if if_tag:
            expression = (if_tag.group(1) or "").strip()
            if not expression:
                raise TemplateError("{{#if}} needs a condition")
            tree = parse_condition(expression, params)
            value = evaluate(tree, values, "") if values is not None and visible else True
            stack.append(([], value, False))
        elif sigil == "else" and not rest:
            if len(stack) == 1 or in_else:
                raise TemplateError("{{else}} outside an {{#if}} block")
            stack[-1] = (parts, active, True)
        elif sigil == "/" and rest == "if":
            if len(stack) == 1:
                raise TemplateError("{{/if}} without a matching {{#if}}")
            inner, _, _ = stack.pop()
            if _visible(stack):
                stack[-1][0].append("".join(inner))
        else:
            tag = match.group(0)
            raise TemplateError(
                f"unsupported template construct {tag}: only {{{{#if cond}}}}, {{{{else}}}} "
                "and {{/if}} blocks are supported"
            )
    if len(stack) > 1:
        raise TemplateError("{{#if}} block is never closed with {{/if}}")
    if _visible(stack):
        stack[-1][0].append(text[position:])
    return "".join(stack[0][0])


def _visible(stack: list[tuple[list[str], bool, bool]]) -> bool:
    """Whether text at the top of the stack is kept: every enclosing branch is taken."""
    return all(active != in_else for _, active, in_else in stack)
