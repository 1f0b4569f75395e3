"""The ``condition`` expressions of agents and ``{{#if}}`` blocks: parsing and evaluation."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any, Final

from context.cluster_templates.spec import (
    JSON,
    TemplateError,
    is_number,
    same_value,
    template_error,
)

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


def parse_condition(expression: str, params: set[str]) -> Node:
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


def evaluate(node: Node, values: dict[str, JSON] | None, where: str) -> bool:
    values = values or {}
    kind = node[0]
    if kind == "or":
        return evaluate(node[1], values, where) or evaluate(node[2], values, where)
    if kind == "and":
        return evaluate(node[1], values, where) and evaluate(node[2], values, where)
    if kind == "not":
        return not evaluate(node[1], values, where)
    if kind == "truthy":
        # Params are scalars, so Python truthiness is JavaScript's: false, 0 and "" are false.
        return bool(_operand(node[1], values))
    _, op, left_node, right_node = node
    left, right = _operand(left_node, values), _operand(right_node, values)
    if op in ("==", "!="):
        equal = same_value(left, right)
        return equal if op == "==" else not equal
    numbers = all(is_number(v) for v in (left, right))
    if not numbers and not all(isinstance(v, str) for v in (left, right)):
        message = f"cannot order {left!r} {op} {right!r}: compare two numbers or two strings"
        raise template_error([{"field": where, "message": message}])
    return bool(_ORDERINGS[op](left, right))


def _operand(node: Node, values: dict[str, JSON]) -> JSON:
    return values.get(node[1]) if node[0] == "param" else node[1]
