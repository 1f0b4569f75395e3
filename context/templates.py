"""Cluster templates (SPEC §4): checking zeroshot's template shape and resolving params, pure.

A template is ``{name, description, params: {p: {type, enum?, default?, description?}},
agents: [...]}``. Resolving merges the caller's params over the defaults, checks them, drops the
agents whose ``condition`` is false, keeps or drops ``{{#if cond}}…{{else}}…{{/if}}`` blocks and
replaces ``{{param}}`` placeholders. Placeholders that do not name a param (``{{result.summary}}``,
``{{ISSUE_OPENED.content.text}}``) belong to the orchestrator at run time and are left untouched.
Any construct we do not understand is a ``TemplateError``, never a silent guess.
"""

from __future__ import annotations

import copy
import json
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from zeroshot_web.errors import InvalidInput

JSON = Any

PARAM_TYPES: Final = ("string", "number", "integer", "boolean")
BUILTIN_TEMPLATES_DIR: Final = Path(__file__).resolve().parent / "builtin_templates"

_PARAM_NAME = re.compile(r"^\w+$")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_WHOLE_PLACEHOLDER = re.compile(r"^\{\{\s*(\w+)\s*\}\}$")
_IF_TAG = re.compile(r"^if(?:\s+(.*))?$", re.DOTALL)
# Block tags in Handlebars style: {{#name …}}, {{/name}}, {{else …}}, {{^name}}.
_BLOCK_TAG = re.compile(r"\{\{\s*([#/^]|else\b)\s*([^}]*?)\s*\}\}")
_BLANK_RUNS = re.compile(r"\n{3,}")

# Collects one problem: (field path, message).
Report = Callable[[str, str], None]


class TemplateError(InvalidInput, ValueError):
    """A template or its params are invalid; ``details["errors"]`` lists every problem found.

    Each problem is ``{"field": "agents[1].prompt", "message": "..."}``.
    """

    code = "template_invalid"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared template param."""

    name: str
    type: str
    enum: tuple[JSON, ...] | None = None
    default: JSON = None
    has_default: bool = False
    description: str = ""

    @property
    def required(self) -> bool:
        return not self.has_default


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A checked template; ``raw`` is a private deep copy of the source JSON."""

    name: str
    description: str
    params: tuple[ParamSpec, ...]
    agents: tuple[dict[str, JSON], ...]
    raw: dict[str, JSON] = field(repr=False, compare=False)

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def required_params(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)


# --- public functions ----------------------------------------------------------------------------


def template_parse(raw: JSON) -> TemplateSpec:
    """Check the shape of a template; raise ``TemplateError`` listing every problem."""
    problems: list[dict[str, str]] = []

    def problem(where: str, message: str) -> None:
        problems.append({"field": where, "message": f"{where}: {message}"})

    if not isinstance(raw, dict):
        raise _error([{"field": "", "message": "a template must be a JSON object"}])
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
        raise _error(problems)
    return TemplateSpec(
        name=str(name),
        description=str(description),
        params=params,
        agents=tuple(copy.deepcopy(a) for a in agents),
        raw=copy.deepcopy(raw),
    )


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
            if error := _value_error(param, value):
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
        raise _error(problems)
    return values


def template_builtin_list() -> dict[str, dict[str, JSON]]:
    """The project's own templates, by file name (``single-worker``, ``debug-workflow``, ...)."""
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(BUILTIN_TEMPLATES_DIR.glob("*.json"))
    }


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
            bad = [v for v in enum if not _has_type(kind, v)]
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
        if spec.has_default and (error := _value_error(spec, spec.default)):
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
                _parse_condition(condition, params)
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
        _render_blocks(text, None, params)
    except TemplateError as exc:
        problem(where, exc.message)


# --- resolution ----------------------------------------------------------------------------------


def _without_condition(agent: dict[str, JSON]) -> dict[str, JSON]:
    # The condition is a template-time switch; the resolved config no longer needs it.
    return {k: v for k, v in agent.items() if k != "condition"}


def _agent_enabled(agent: dict[str, JSON], values: dict[str, JSON], where: str) -> bool:
    condition = agent.get("condition", True)
    if isinstance(condition, bool):
        return condition
    return _evaluate(_parse_condition(condition, set(values)), values, where)


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
        rendered = _render_blocks(text, values, set(values))
    except TemplateError as exc:
        raise _error([{"field": where, "message": f"{where}: {exc.message}"}]) from None
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


def _render_blocks(text: str, values: dict[str, JSON] | None, params: set[str]) -> str:
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
            tree = _parse_condition(expression, params)
            value = _evaluate(tree, values, "") if values is not None and visible else True
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


# --- conditions ----------------------------------------------------------------------------------
# A small expression language, enough for the zeroshot templates:
#   expr := and ("||" and)* ; and := unary ("&&" unary)* ; unary := "!" unary | "(" expr ")" | cmp
#   cmp := operand (("==" | "!=" | "<" | "<=" | ">" | ">=") operand)?
#   operand := {{param}} | param | 'text' | "text" | number | true | false

_TOKEN = re.compile(
    r"\s*(?:(?P<placeholder>\{\{\s*\w+\s*\}\})|(?P<op>==|!=|<=|>=|&&|\|\||[<>!()])"
    r"|(?P<string>'[^']*'|\"[^\"]*\")|(?P<number>-?\d+(?:\.\d+)?)|(?P<name>[A-Za-z_]\w*))"
)
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_ORDERINGS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

Node = tuple[Any, ...]


def _tokenize(expression: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise TemplateError(
                f"unsupported condition {expression!r}: cannot read {text[position:].strip()!r}"
            )
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def _parse_condition(expression: str, params: set[str]) -> Node:
    tokens = _tokenize(expression)
    if not tokens:
        raise TemplateError("empty condition")
    position = 0

    def peek() -> tuple[str, str] | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal position
        if position >= len(tokens):
            raise TemplateError(f"condition {expression!r} ends too early")
        position += 1
        return tokens[position - 1]

    def parse_or() -> Node:
        node = parse_and()
        while peek() == ("op", "||"):
            take()
            node = ("or", node, parse_and())
        return node

    def parse_and() -> Node:
        node = parse_unary()
        while peek() == ("op", "&&"):
            take()
            node = ("and", node, parse_unary())
        return node

    def parse_unary() -> Node:
        if peek() == ("op", "!"):
            take()
            return ("not", parse_unary())
        if peek() == ("op", "("):
            take()
            node = parse_or()
            if take() != ("op", ")"):
                raise TemplateError(f"condition {expression!r}: missing ')'")
            return node
        left = parse_operand()
        token = peek()
        if token and token[0] == "op" and token[1] in _COMPARISONS:
            take()
            return ("cmp", token[1], left, parse_operand())
        return ("truthy", left)

    def parse_operand() -> Node:
        kind, text = take()
        if kind == "placeholder" or kind == "name":
            name = text.strip("{} ")
            if kind == "name" and name in ("true", "false"):
                return ("literal", name == "true")
            if name not in params:
                raise TemplateError(
                    f"condition {expression!r} names {name!r}, which is not a param"
                )
            return ("param", name)
        if kind == "string":
            return ("literal", text[1:-1])
        if kind == "number":
            return ("literal", float(text) if "." in text else int(text))
        raise TemplateError(f"condition {expression!r}: unexpected {text!r}")

    tree = parse_or()
    if position != len(tokens):
        raise TemplateError(f"condition {expression!r}: unexpected {tokens[position][1]!r}")
    return tree


def _evaluate(node: Node, values: dict[str, JSON] | None, where: str) -> bool:
    values = values or {}
    kind = node[0]
    if kind == "or":
        return _evaluate(node[1], values, where) or _evaluate(node[2], values, where)
    if kind == "and":
        return _evaluate(node[1], values, where) and _evaluate(node[2], values, where)
    if kind == "not":
        return not _evaluate(node[1], values, where)
    if kind == "truthy":
        # Params are scalars, so Python truthiness is JavaScript's: false, 0 and "" are false.
        return bool(_operand(node[1], values))
    _, op, left_node, right_node = node
    left, right = _operand(left_node, values), _operand(right_node, values)
    if op in ("==", "!="):
        equal = _same(left, right)
        return equal if op == "==" else not equal
    numbers = all(_is_number(v) for v in (left, right))
    if not numbers and not all(isinstance(v, str) for v in (left, right)):
        message = f"cannot order {left!r} {op} {right!r}: compare two numbers or two strings"
        raise _error([{"field": where, "message": message}])
    return bool(_ORDERINGS[op](left, right))


def _operand(node: Node, values: dict[str, JSON]) -> JSON:
    return values.get(node[1]) if node[0] == "param" else node[1]


def _same(left: JSON, right: JSON) -> bool:
    """Strict equality: ``true`` is not ``1``, but ``2`` equals ``2.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)


# --- param values --------------------------------------------------------------------------------


def _is_number(value: JSON) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _has_type(kind: str, value: JSON) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return _is_number(value)


def _value_error(param: ParamSpec, value: JSON) -> str | None:
    if not _has_type(param.type, value):
        return f"{param.name} must be of type {param.type}, got {_show(value)}"
    if param.enum is not None and not any(_same(value, option) for option in param.enum):
        options = ", ".join(_show(option) for option in param.enum)
        return f"{param.name} must be one of {options}, got {_show(value)}"
    return None


def _show(value: JSON) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


def _error(problems: list[dict[str, str]]) -> TemplateError:
    first = problems[0]["message"]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return TemplateError(f"{first}{more}", {"errors": problems})
