"""Resolving a template into a cluster config (SPEC §4): params, conditions, placeholders."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping

from context.cluster_templates.blocks import render_blocks
from context.cluster_templates.conditions import evaluate, parse_condition
from context.cluster_templates.parse import template_parse
from context.cluster_templates.spec import (
    JSON,
    TemplateError,
    TemplateSpec,
    template_error,
    value_error,
)

_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_WHOLE_PLACEHOLDER = re.compile(r"^\{\{\s*(\w+)\s*\}\}$")
_BLANK_RUNS = re.compile(r"\n{3,}")


def template_resolve(template: JSON, params: Mapping[str, JSON] | None = None) -> dict[str, JSON]:
    """Resolve a template into a cluster config ``{agents: [...], ...}`` (without ``params``)."""
    spec = template_parse(template)
    values = template_params(spec, params or {})
    config: dict[str, JSON] = {}
    for key, value in spec.raw.items():
        if key == "params":
            continue
        if key == "agents":
            config["agents"] = [
                _resolve_value(_without_condition(agent), values, f"agents[{index}]")
                for index, agent in enumerate(value)
                if _agent_enabled(agent, values, f"agents[{index}].condition")
            ]
        else:
            config[key] = _resolve_value(value, values, key)
    return config


def template_params(spec: TemplateSpec, params: Mapping[str, JSON]) -> dict[str, JSON]:
    """The caller's params merged over the defaults, type- and enum-checked."""
    problems: list[dict[str, str]] = []
    declared = {p.name for p in spec.params}
    for name in sorted(set(params) - declared):
        known = ", ".join(sorted(declared)) or "none"
        message = f"params.{name}: unknown param {name!r} (declared: {known})"
        problems.append({"field": f"params.{name}", "message": message})
    values: dict[str, JSON] = {}
    missing: list[str] = []
    for param in spec.params:
        if param.name in params:
            value = params[param.name]
            if error := value_error(param, value):
                problems.append({"field": f"params.{param.name}", "message": error})
                continue
            values[param.name] = copy.deepcopy(value)
        elif param.has_default:
            values[param.name] = copy.deepcopy(param.default)
        else:
            missing.append(param.name)
    if missing:
        problems.append(
            {"field": "params", "message": f"missing required params: {', '.join(missing)}"}
        )
    if problems:
        raise template_error(problems)
    return values


# --- resolution ----------------------------------------------------------------------------------


def _without_condition(agent: dict[str, JSON]) -> dict[str, JSON]:
    # The condition is a template-time switch; the resolved config no longer needs it.
    return {k: v for k, v in agent.items() if k != "condition"}


def _agent_enabled(agent: dict[str, JSON], values: dict[str, JSON], where: str) -> bool:
    condition = agent.get("condition", True)
    if isinstance(condition, bool):
        return condition
    return evaluate(parse_condition(condition, set(values)), values, where)


def _resolve_value(value: JSON, values: dict[str, JSON], where: str) -> JSON:
    if isinstance(value, str):
        return _resolve_string(value, values, where)
    if isinstance(value, dict):
        return {k: _resolve_value(v, values, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_value(v, values, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _resolve_string(text: str, values: dict[str, JSON], where: str) -> JSON:
    try:
        rendered = render_blocks(text, values, set(values))
    except TemplateError as exc:
        raise template_error([{"field": where, "message": f"{where}: {exc.message}"}]) from None
    if rendered != text:
        # A dropped block leaves its surrounding blank lines behind; fold them.
        rendered = _BLANK_RUNS.sub("\n\n", rendered)
    whole = _WHOLE_PLACEHOLDER.match(rendered)
    if whole and whole.group(1) in values:
        return copy.deepcopy(values[whole.group(1)])
    return _PLACEHOLDER.sub(
        lambda m: _as_text(values[m.group(1)]) if m.group(1) in values else m.group(0), rendered
    )


def _as_text(value: JSON) -> str:
    """A param value inside a longer string, written as JSON writes scalars."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
