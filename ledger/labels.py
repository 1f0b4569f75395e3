"""A cluster's labels: which runner pool serves it (SPEC §7.4, runner pools).

A small bounded string map, ``{"pool": "demo"}``: a claim that asks for labels only gets the
tasks of clusters carrying every one of them. Keys and values are tenant text shown on pages and
sent to runners, so they are parsed here once, at the edge, into a plain ``dict[str, str]``.
docs/decisions/0115-runner-pools-labels-and-providers.md.
"""

from __future__ import annotations

import re

from ledger.errors import InvalidInput

LABELS_MAX = 16
LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}")
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9_.\-/:]{0,63}")
LABEL_RULE = (
    f"at most {LABELS_MAX} labels; keys of 1-63 of A-Z a-z 0-9 _ . - / starting with a letter "
    "or digit, values of 0-63 of the same and :"
)


def labels_parse(raw: object, *, field: str = "labels") -> dict[str, str]:
    """``raw`` as labels, or ``InvalidInput`` naming the first problem. None is no labels."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidInput(f"{field} must be an object of strings", details={"field": field})
    if len(raw) > LABELS_MAX:
        raise InvalidInput(
            f"{field}: at most {LABELS_MAX} labels", details={"field": field, "rule": LABEL_RULE}
        )
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.fullmatch(key):
            raise InvalidInput(
                f"{field}: a label key must be 1-63 of A-Z a-z 0-9 _ . - /",
                details={"field": field, "key": repr(key)[:80], "rule": LABEL_RULE},
            )
        if not isinstance(value, str) or not LABEL_VALUE_RE.fullmatch(value):
            raise InvalidInput(
                f"{field}.{key}: a label value must be 0-63 of A-Z a-z 0-9 _ . - / :",
                details={"field": f"{field}.{key}", "rule": LABEL_RULE},
            )
        labels[key] = value
    return dict(sorted(labels.items()))


def labels_stored(raw: object) -> dict[str, str]:
    """Labels as stored: what is not a string map (a row written by hand) reads as none."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def labels_text(text: str, *, field: str = "labels") -> dict[str, str]:
    """Labels typed as ``pool=demo, team=a`` (a form, a command line), parsed."""
    raw: dict[str, str] = {}
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise InvalidInput(f"{field}: {part[:40]!r} is not key=value", details={"field": field})
        raw[key] = value
    return labels_parse(raw, field=field)
