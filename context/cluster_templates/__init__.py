"""Cluster templates (SPEC §4): checking zeroshot's template shape and resolving params, pure.

A template is ``{name, description, params: {p: {type, enum?, default?, description?}},
agents: [...]}``. Resolving merges the caller's params over the defaults, checks them, drops the
agents whose ``condition`` is false, keeps or drops ``{{#if cond}}…{{else}}…{{/if}}`` blocks and
replaces ``{{param}}`` placeholders. Placeholders that do not name a param (``{{result.summary}}``,
``{{ISSUE_OPENED.content.text}}``) belong to the orchestrator at run time and are left untouched.
Any construct we do not understand is a ``TemplateError``, never a silent guess.

Layout: ``spec`` (the error, params and their values), ``parse`` (shape checks),
``conditions`` (the condition expressions), ``blocks`` (``{{#if}}`` blocks), ``resolve``
(params merged and placeholders replaced) and ``builtin`` (the project's own templates).
"""

from __future__ import annotations

from context.cluster_templates.builtin import (
    BUILTIN_TEMPLATES_DIR,
    ZEROSHOT_PREFIX,
    template_builtin_list,
    template_zeroshot_list,
)
from context.cluster_templates.parse import template_parse
from context.cluster_templates.resolve import template_params, template_resolve
from context.cluster_templates.spec import JSON, PARAM_TYPES, ParamSpec, TemplateError, TemplateSpec

__all__ = [
    "BUILTIN_TEMPLATES_DIR",
    "JSON",
    "PARAM_TYPES",
    "ZEROSHOT_PREFIX",
    "ParamSpec",
    "TemplateError",
    "TemplateSpec",
    "template_builtin_list",
    "template_params",
    "template_parse",
    "template_resolve",
    "template_zeroshot_list",
]
