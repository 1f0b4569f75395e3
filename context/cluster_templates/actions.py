"""Hook actions of a template (SPEC §7.5): the ones this server refuses, and the stored ones.

The server never runs shell commands from a template, so ``execute_system_command`` and
``verify_pull_request`` refuse the template. ``onStart``, ``onComplete`` and ``onError`` all run
(SPEC §7.5).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from context.cluster_templates.spec import JSON

_REFUSED: Final = {
    "execute_system_command": "the server never runs shell commands from a template",
    "verify_pull_request": (
        "the server never runs shell commands from a template, so it cannot verify pull requests"
    ),
}
_RUN_HOOKS: Final = ("onStart", "onComplete", "onError")


@dataclass(frozen=True, slots=True)
class ActionsCheck:
    """Problems of a template's hooks: ``errors`` refuse the template, ``warnings`` advise.

    Each problem is ``{"agent", "field", "message"}``, like the other template problems.
    """

    errors: tuple[dict[str, JSON], ...] = ()
    warnings: tuple[dict[str, JSON], ...] = ()


def template_actions_check(template_body: Mapping[str, JSON]) -> ActionsCheck:
    """Refuse hook actions the server never executes; warn about hooks it never runs."""
    errors: list[dict[str, JSON]] = []
    warnings: list[dict[str, JSON]] = []
    agents = template_body.get("agents")
    for position, agent in enumerate(agents if isinstance(agents, list) else []):
        hooks = agent.get("hooks") if isinstance(agent, Mapping) else None
        if not isinstance(hooks, Mapping):
            continue
        for name, hook in hooks.items():
            if isinstance(hook, Mapping):
                where = f"agents[{position}].hooks.{name}"
                _check_hook(name, hook, _Reporter(agent.get("id"), where, errors, warnings))
    return ActionsCheck(errors=tuple(errors), warnings=tuple(warnings))


@dataclass(frozen=True, slots=True)
class _Reporter:
    agent: JSON
    where: str
    errors: list[dict[str, JSON]]
    warnings: list[dict[str, JSON]]

    def error(self, field: str, message: str) -> None:
        self.errors.append({"agent": self.agent, "field": self.where + field, "message": message})

    def warning(self, field: str, message: str) -> None:
        self.warnings.append({"agent": self.agent, "field": self.where + field, "message": message})


def _check_hook(name: str, hook: Mapping[str, JSON], report: _Reporter) -> None:
    action = hook.get("action")
    if action in _REFUSED:
        report.error(".action", f"{action} is refused: {_REFUSED[action]}")
    elif action != "publish_message":
        shown = json.dumps(action) if action is not None else "missing"
        report.error(".action", f"the action is {shown}; a hook can only publish_message")
    if name not in _RUN_HOOKS:
        report.warning("", f"{name} is not a hook: the server runs onStart, onComplete, onError")
