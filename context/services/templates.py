"""Cluster templates in the database (SPEC §4): checked saves with versions, and clusters.

A template is checked in two steps before it is saved: its shape (``template_parse``), then its
agents once resolved (``strategy_validate_agents``). Errors block the save; warnings are returned.
Every body a template ever had is a ``ClusterTemplateVersion``; the newest is the current body.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max

from context.agent_schema import schema_problems
from context.agents import AgentConfigError, agents_parse
from context.cluster_templates import (
    JSON,
    TemplateError,
    TemplateSpec,
    template_builtin_list,
    template_params,
    template_parse,
    template_resolve,
    template_zeroshot_list,
)
from context.cluster_templates.actions import template_actions_check
from context.models import ClusterTemplate, ClusterTemplateVersion
from context.strategy import strategy_validate_agents
from ledger import interfaces as ledger
from ledger.errors import InvalidInput, NotFound
from ledger.interfaces import (
    ClusterRecord,
    JsonValueError,
    json_encode_checked,
    text_check,
    text_problem,
)

# A cluster keeps the name of its template in a column of 128 characters: a longer name would
# save and then never launch.
NAME_MAX = 128
# A stand-in for a required param that has neither a default nor allowed values, used only to
# check a template (docs/decisions/0011-template-validation-params.md).
_SAMPLE_VALUES: dict[str, JSON] = {"integer": 1, "number": 1, "boolean": False}

SaveStatus = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, slots=True)
class TemplateCheck:
    """The problems of a template body: ``errors`` block a save, ``warnings`` do not.

    Each problem is a dict with at least ``field`` and ``message``; strategy problems also name
    the ``agent`` and the ``source`` index (SPEC §2.1).
    """

    errors: list[dict[str, JSON]] = field(default_factory=list)
    warnings: list[dict[str, JSON]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, JSON]:
        return {"valid": self.valid, "errors": self.errors, "warnings": self.warnings}


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    """A stored template, detached from the ORM."""

    id: int
    name: str
    description: str
    body: dict[str, JSON]
    builtin: bool
    version: int
    version_count: int
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @property
    def params(self) -> dict[str, JSON]:
        params = self.body.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def agent_count(self) -> int:
        agents = self.body.get("agents")
        return len(agents) if isinstance(agents, list) else 0


@dataclass(frozen=True, slots=True)
class TemplateVersionRecord:
    """One saved body of a template."""

    version: int
    body: dict[str, JSON]
    note: str
    created_at: datetime.datetime


@dataclass(frozen=True, slots=True)
class TemplateSaved:
    """What ``template_save`` did, with the warnings of the saved body."""

    template: TemplateRecord
    status: SaveStatus
    warnings: list[dict[str, JSON]]


# --- checking ------------------------------------------------------------------------------------


def template_validation_params(spec: TemplateSpec) -> dict[str, JSON]:
    """Values for the required params of a template, to check it (the defaults fill the rest).

    A required param takes its first allowed value (zeroshot's ``task_type``), or else a sample
    of its type. Creating a cluster never does this: there a missing param is an error.
    """
    filled: dict[str, JSON] = {}
    for param in spec.params:
        if not param.required:
            continue
        if param.enum:
            filled[param.name] = copy.deepcopy(param.enum[0])
        else:
            filled[param.name] = _SAMPLE_VALUES.get(param.type, f"<{param.name}>")
    return filled


def template_check(body: JSON) -> TemplateCheck:
    """Check a template body: storable JSON, shape, resolution with validation params, and
    agent strategies."""
    try:
        json_encode_checked(body, max_depth=settings.LEDGER_MAX_JSON_DEPTH)
    except JsonValueError as error:
        where = error.path.lstrip(".")
        return TemplateCheck(
            errors=[{"field": where, "message": f"{where or 'the template'} {error.problem}"}]
        )
    try:
        spec = template_parse(body)
    except TemplateError as error:
        return TemplateCheck(errors=_problems(error))
    params = template_validation_params(spec)
    warnings: list[dict[str, JSON]] = [
        {
            "field": f"params.{name}",
            "message": f"params.{name} has no default; checked with {json.dumps(value)}",
        }
        for name, value in params.items()
    ]
    try:
        template_resolve(body, params)
        # Agents switched off by their condition are checked too: another choice of params
        # switches them on.
        agents = template_resolve(_every_agent(body), params)["agents"]
    except TemplateError as error:
        return TemplateCheck(errors=_problems(error), warnings=warnings)
    report = strategy_validate_agents(agents)
    actions = template_actions_check(_every_agent(body))
    config_errors: list[dict[str, JSON]] = []
    try:
        agents_parse(agents)
    except AgentConfigError as error:
        config_errors.append({"field": error.field, "message": error.message})
    return TemplateCheck(
        errors=config_errors
        + [issue.to_dict() for issue in report.errors]
        + list(actions.errors)
        + _schema_errors(agents),
        warnings=warnings + [issue.to_dict() for issue in report.warnings] + list(actions.warnings),
    )


def _schema_errors(agents: JSON) -> list[dict[str, JSON]]:
    """Each agent's ``jsonSchema`` must be self-contained and bounded (``context.agent_schema``)."""
    errors: list[dict[str, JSON]] = []
    for position, agent in enumerate(agents if isinstance(agents, list) else []):
        if not isinstance(agent, dict) or "jsonSchema" not in agent:
            continue
        where = f"agents[{position}].jsonSchema"
        errors += [
            {"field": where, "message": f"{where} is invalid: {problem}"}
            for problem in schema_problems(agent["jsonSchema"])
        ]
    return errors


def _every_agent(body: Mapping[str, JSON]) -> dict[str, JSON]:
    copied = copy.deepcopy(dict(body))
    agents = copied.get("agents")
    if isinstance(agents, list):
        copied["agents"] = [
            {k: v for k, v in agent.items() if k != "condition"}
            if isinstance(agent, dict)
            else agent
            for agent in agents
        ]
    return copied


def _problems(error: TemplateError) -> list[dict[str, JSON]]:
    details = error.details if isinstance(error.details, dict) else {}
    problems = details.get("errors")
    if isinstance(problems, list) and problems:
        return [dict(p) for p in problems if isinstance(p, dict)]
    return [{"field": "", "message": error.message}]


def _invalid(name: str, check: TemplateCheck) -> InvalidInput:
    first = str(check.errors[0].get("message", ""))
    more = f" (and {len(check.errors) - 1} more)" if len(check.errors) > 1 else ""
    return InvalidInput(
        f"template {name!r} is invalid: {first}{more}",
        details={"errors": check.errors, "warnings": check.warnings},
    )


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def problem_path(body: JSON, problem: Mapping[str, JSON]) -> list[str | int]:
    """Where in a template body a problem of ``template_check`` is, as keys and indexes.

    Template problems name a dotted path (``agents[1].role``); strategy problems name their
    agent by id, the source by index and the field, inside ``agents[i].contextStrategy``.
    """
    field = str(problem.get("field") or "")
    if "agent" not in problem:
        return [int(index) if index else key for key, index in _PATH_PART.findall(field)]
    agents = body.get("agents") if isinstance(body, dict) else None
    position = next(
        (
            i
            for i, agent in enumerate(agents if isinstance(agents, list) else [])
            if isinstance(agent, dict) and agent.get("id") == problem.get("agent")
        ),
        None,
    )
    if position is None:
        return ["agents"]
    path: list[str | int] = ["agents", position, "contextStrategy"]
    source = problem.get("source")
    if isinstance(source, int):
        path += ["sources", source]
    return [*path, field] if field else path


def template_problems(body: JSON) -> list[dict[str, JSON]]:
    """``template_check`` as an editor wants it: each problem with its path and severity."""
    check = template_check(body)
    return [
        {
            "path": problem_path(body, problem),
            "message": str(problem.get("message", "")),
            "severity": severity,
        }
        for severity, problems in (("error", check.errors), ("warning", check.warnings))
        for problem in problems
    ]


def template_preview_agents(*, body: JSON, params: Mapping[str, JSON]) -> list[dict[str, JSON]]:
    """The agents a template body gives with a cluster's params, as a cluster would run them.

    Params the template does not declare are left out, so that a template can be tried against
    any cluster; a missing required param is a ``TemplateError`` naming it. The template's
    ``contextRules`` reach every agent that has none of its own.
    """
    spec = template_parse(body)
    declared = {param.name for param in spec.params}
    given = {name: value for name, value in params.items() if name in declared}
    resolved = template_resolve(body, given)
    rules = resolved.get("contextRules")
    agents = [dict(a) for a in resolved.get("agents", []) if isinstance(a, dict)]
    if isinstance(rules, str) and rules.strip():
        for agent in agents:
            agent.setdefault("contextRules", rules)
    return agents


# --- saving --------------------------------------------------------------------------------------


def template_save(*, name: str, body: JSON, note: str = "", builtin: bool = False) -> TemplateSaved:
    """Create or change a template after checking it; a changed body becomes a new version.

    ``builtin`` only marks a template when it is created. Saving an identical body does nothing.
    """
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > NAME_MAX:
        raise InvalidInput(f"a template name is 1-{NAME_MAX} characters", details={"field": "name"})
    text_check(name, field="name")
    check = template_check(body)
    if not check.valid:
        raise _invalid(name, check)
    description = body.get("description")
    description = description if isinstance(description, str) else ""
    with transaction.atomic():
        template = ClusterTemplate.objects.select_for_update().filter(name=name).first()
        status: SaveStatus
        if template is None:
            template = ClusterTemplate.objects.create(
                name=name, description=description, body=body, builtin=builtin
            )
            status = "created"
        elif _canonical(template.body) == _canonical(body):
            status = "unchanged"
        else:
            template.body = body
            template.description = description
            template.save(update_fields=["body", "description", "updated_at"])
            status = "updated"
        if status != "unchanged" or not template.versions.exists():
            newest = template.versions.aggregate(newest=Max("version"))["newest"] or 0
            ClusterTemplateVersion.objects.create(
                template=template, version=newest + 1, body=body, note=note[:200]
            )
    return TemplateSaved(template=template_get(name=name), status=status, warnings=check.warnings)


def templates_load_builtin(
    *, template_model: Any = ClusterTemplate, version_model: Any = ClusterTemplateVersion
) -> list[str]:
    """Create the built-in templates that are missing (ours, then zeroshot's) and return their
    names.

    Existing ones are left alone, even when the file changed: an operator may have edited them.
    The data migrations pass their historical models.
    """
    created: list[str] = []
    for name, body in {**template_builtin_list(), **template_zeroshot_list()}.items():
        check = template_check(body)
        if not check.valid:
            raise _invalid(name, check)
        with transaction.atomic():
            template, made = template_model.objects.get_or_create(
                name=name,
                defaults={
                    "description": str(body.get("description") or ""),
                    "body": body,
                    "builtin": True,
                },
            )
            if made:
                version_model.objects.create(
                    template=template, version=1, body=body, note="built-in template"
                )
                created.append(name)
    return created


# --- reading -------------------------------------------------------------------------------------


def _record(template: ClusterTemplate, *, version: int, version_count: int) -> TemplateRecord:
    return TemplateRecord(
        id=template.pk,
        name=template.name,
        description=template.description,
        body=template.body if isinstance(template.body, dict) else {},
        builtin=template.builtin,
        version=version,
        version_count=version_count,
        created_at=template.created_at,
        updated_at=template.updated_at,
    )


def _with_versions() -> Any:
    return ClusterTemplate.objects.annotate(
        newest_version=Max("versions__version"), version_total=Count("versions")
    )


def template_get(*, name: str) -> TemplateRecord:
    """One template with its body, or ``NotFound``."""
    # A name that could not be stored names no template (and PostgreSQL refuses a NUL).
    template = _with_versions().filter(name=name).first() if text_problem(name) is None else None
    if template is None:
        raise NotFound(f"template {name!r} does not exist", details={"template": name})
    return _record(
        template, version=template.newest_version or 0, version_count=template.version_total
    )


def template_list() -> list[TemplateRecord]:
    """Every template by name, with its version count (one query)."""
    return [
        _record(t, version=t.newest_version or 0, version_count=t.version_total)
        for t in _with_versions().order_by("name")
    ]


def template_versions(*, name: str) -> list[TemplateVersionRecord]:
    """The saved bodies of a template, newest first."""
    versions = ClusterTemplateVersion.objects.filter(template__name=name).order_by("-version")
    return [
        TemplateVersionRecord(version=v.version, body=v.body, note=v.note, created_at=v.created_at)
        for v in versions
    ]


def template_version_diff(*, name: str, version: int) -> str:
    """A unified diff of pretty-printed JSON from one version to the current body."""
    current = template_get(name=name)
    old = ClusterTemplateVersion.objects.filter(template__name=name, version=version).first()
    if old is None:
        raise NotFound(
            f"template {name!r} has no version {version}",
            details={"template": name, "version": version},
        )
    lines = difflib.unified_diff(
        _pretty(old.body).splitlines(),
        _pretty(current.body).splitlines(),
        fromfile=f"{name} version {version}",
        tofile=f"{name} current (version {current.version})",
        lineterm="",
    )
    return "\n".join(lines)


def _pretty(body: JSON) -> str:
    # Sorted keys: PostgreSQL's jsonb does not keep key order, and a diff must not show that.
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False)


def _canonical(body: JSON) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- clusters ------------------------------------------------------------------------------------


def cluster_config_validate(config: Mapping[str, JSON] | None, *, where: str = "config") -> None:
    """Refuse a cluster config the server could not run: its agents as ``context.agents`` parses
    them (every number within its bound) and their strategies (SPEC §2.1). ``InvalidInput``
    names the first problem."""
    if config is None:
        return
    try:
        agents_parse(config.get("agents"))
    except AgentConfigError as error:
        # A field path reads on from the config's name: "config.agents[1].id must be …".
        field = f"{where}.{error.field}" if where.isidentifier() else error.field
        text = f"{field} {error.problem}" if where.isidentifier() else f"{where}: {error.message}"
        raise InvalidInput(text, details={"field": field}) from None
    report = strategy_validate_agents(config.get("agents") or [])
    if not report.valid:
        first = report.errors[0].message
        raise InvalidInput(
            f"{where}: {first}",
            details={"errors": [issue.to_dict() for issue in report.errors]},
        )


def cluster_create_from_template(
    *,
    template_name: str,
    params: Mapping[str, JSON] | None,
    cluster_id: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> ClusterRecord:
    """Create a cluster whose config is the template resolved with ``params``.

    Unknown template: ``NotFound``. Bad, unknown or missing params: ``TemplateError`` (422)
    naming the param. The cluster keeps the params with the defaults filled in.
    """
    template = template_get(name=template_name)
    given = dict(params or {})
    spec = template_parse(template.body)
    values = template_params(spec, given)
    config = template_resolve(template.body, given)
    cluster_config_validate(config, where=f"template {template_name!r} resolves to invalid agents")
    return ledger.cluster_create(
        cluster_id=cluster_id,
        config=config,
        template=template_name,
        params=values,
        labels=dict(labels) if labels is not None else None,
    )
