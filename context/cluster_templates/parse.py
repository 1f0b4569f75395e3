"""Checking a template's shape (SPEC §4): every problem is reported, none is guessed."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator

from context.cluster_templates.blocks import render_blocks
from context.cluster_templates.conditions import parse_condition
from context.cluster_templates.spec import (
    JSON,
    PARAM_TYPES,
    ParamSpec,
    Report,
    TemplateError,
    TemplateSpec,
    has_type,
    template_error,
    value_error,
)
from ledger.validation import agent_id_problem

_PARAM_NAME = re.compile(r"^\w+$")


def template_parse(raw: JSON) -> TemplateSpec:
    """Check the shape of a template; raise ``TemplateError`` listing every problem."""
    problems: list[dict[str, str]] = []

    def problem(where: str, message: str) -> None:
        problems.append({"field": where, "message": f"{where}: {message}"})

    if not isinstance(raw, dict):
        raise template_error([{"field": "", "message": "a template must be a JSON object"}])
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        problem("name", "required, a non-empty string")
    description = raw.get("description", "")
    if not isinstance(description, str):
        problem("description", "must be a string")
    params = _parse_params(raw.get("params"), problem)
    names = {p.name for p in params}
    agents = raw.get("agents")
    if not isinstance(agents, list) or not agents:
        problem("agents", "required, a non-empty list of agents")
        agents = []
    seen: set[str] = set()
    for index, agent in enumerate(agents):
        _check_agent(agent, f"agents[{index}]", names, seen, problem)
    # Block tags and their conditions are checked everywhere a placeholder could be resolved.
    for where, text in _strings(raw, ""):
        if where != "params" and not where.startswith("params."):
            _check_blocks(text, where, names, problem)
    if problems:
        raise template_error(problems)
    return TemplateSpec(
        name=str(name),
        description=str(description),
        params=params,
        agents=tuple(copy.deepcopy(a) for a in agents),
        raw=copy.deepcopy(raw),
    )


# --- shape checks --------------------------------------------------------------------------------


def _parse_params(raw: JSON, problem: Report) -> tuple[ParamSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problem("params", "must be an object of param specs")
        return ()
    specs: list[ParamSpec] = []
    for name, body in raw.items():
        where = f"params.{name}"
        if not _PARAM_NAME.match(name):
            problem(where, "a param name has only letters, digits and underscores")
            continue
        if not isinstance(body, dict):
            problem(where, "must be an object {type, enum?, default?, description?}")
            continue
        kind = body.get("type")
        if kind not in PARAM_TYPES:
            problem(f"{where}.type", f"must be one of {', '.join(PARAM_TYPES)}, got {kind!r}")
            continue
        enum = body.get("enum")
        if enum is not None:
            if not isinstance(enum, list) or not enum:
                problem(f"{where}.enum", "must be a non-empty list")
                continue
            bad = [v for v in enum if not has_type(kind, v)]
            if bad:
                problem(f"{where}.enum", f"values {bad!r} are not of type {kind}")
                continue
        description = body.get("description", "")
        if not isinstance(description, str):
            problem(f"{where}.description", "must be a string")
        spec = ParamSpec(
            name=name,
            type=kind,
            enum=tuple(enum) if enum is not None else None,
            default=body.get("default"),
            has_default="default" in body,
            description=description if isinstance(description, str) else "",
        )
        if spec.has_default and (error := value_error(spec, spec.default)):
            problem(f"{where}.default", error)
        specs.append(spec)
    return tuple(specs)


def _check_agent(
    agent: JSON, where: str, params: set[str], seen: set[str], problem: Report
) -> None:
    if not isinstance(agent, dict):
        problem(where, "an agent must be an object")
        return
    ident = agent.get("id")
    if not isinstance(ident, str) or not ident.strip():
        problem(f"{where}.id", "required, a non-empty string")
    elif "{{" not in ident and (bad := agent_id_problem(ident)) is not None:
        # An id with a placeholder is checked once resolved, when a cluster is made from it.
        problem(f"{where}.id", bad)
    elif ident in seen:
        problem(f"{where}.id", f"duplicate agent id {ident!r}")
    else:
        seen.add(ident)
    role = agent.get("role")
    if not isinstance(role, str) or not role.strip():
        problem(f"{where}.role", "required, a non-empty string")
    triggers = agent.get("triggers", [])
    if not isinstance(triggers, list):
        problem(f"{where}.triggers", "must be a list of {topic, action}")
        triggers = []
    for index, trigger in enumerate(triggers):
        at = f"{where}.triggers[{index}]"
        if not isinstance(trigger, dict):
            problem(at, "a trigger must be an object {topic, action}")
            continue
        for key in ("topic", "action"):
            if not isinstance(trigger.get(key), str) or not trigger[key].strip():
                problem(f"{at}.{key}", "required, a non-empty string")
    # Agents that only react (e.g. zeroshot's completion-detector, whose triggers all
    # `stop_cluster`) never run a model, so they need no prompt.
    runs_model = not triggers or any(
        isinstance(t, dict) and t.get("action") == "execute_task" for t in triggers
    )
    if "prompt" in agent or runs_model:
        _check_prompt(agent.get("prompt"), f"{where}.prompt", problem)
    for key in ("hooks", "contextStrategy", "jsonSchema"):
        if key in agent and not isinstance(agent[key], dict):
            problem(f"{where}.{key}", "must be an object")
    strategy = agent.get("contextStrategy")
    if isinstance(strategy, dict) and not isinstance(strategy.get("sources", []), list):
        problem(f"{where}.contextStrategy.sources", "must be a list")
    if "condition" in agent:
        condition = agent["condition"]
        if isinstance(condition, str):
            try:
                parse_condition(condition, params)
            except TemplateError as exc:
                problem(f"{where}.condition", exc.message)
        elif not isinstance(condition, bool):
            problem(f"{where}.condition", "must be a string expression or a boolean")


def _check_prompt(prompt: JSON, where: str, problem: Report) -> None:
    if isinstance(prompt, str):
        if not prompt.strip():
            problem(where, "must not be empty")
        return
    if not isinstance(prompt, dict):
        problem(where, "required: a string, or an object with a system (or initial) prompt")
        return
    texts = {k: prompt[k] for k in ("system", "initial", "subsequent") if k in prompt}
    for key, text in texts.items():
        if not isinstance(text, str):
            problem(f"{where}.{key}", "must be a string")
    if not any(isinstance(t, str) and t.strip() for t in texts.values()):
        problem(where, "needs a non-empty system (or initial/subsequent) prompt")


def _strings(value: JSON, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _check_blocks(text: str, where: str, params: set[str], problem: Report) -> None:
    try:
        render_blocks(text, None, params)
    except TemplateError as exc:
        problem(where, exc.message)
