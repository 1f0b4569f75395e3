"""``{% url %}`` as Django writes it, its answers kept (``dashboard.links``): a template
builtin (``settings.TEMPLATES``), so every template's ``url`` tag is this one."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.base import Parser, Token
from django.template.context import Context
from django.template.defaulttags import URLNode
from django.template.defaulttags import url as django_url
from django.urls import NoReverseMatch
from django.utils.html import conditional_escape

from dashboard.links import reverse_kept

register = template.Library()


class KeptURLNode(URLNode):
    """``URLNode.render`` (Django 5.2) with ``reverse_kept`` in place of ``reverse``."""

    def render(self, context: Context) -> Any:
        args = [arg.resolve(context) for arg in self.args]
        kwargs = {k: v.resolve(context) for k, v in self.kwargs.items()}
        view_name = self.view_name.resolve(context)
        try:
            current_app = context.request.current_app  # type: ignore[attr-defined]
        except AttributeError:
            try:
                current_app = context.request.resolver_match.namespace  # type: ignore[attr-defined]
            except AttributeError:
                current_app = None
        url = ""
        try:
            url = reverse_kept(view_name, args=args, kwargs=kwargs, current_app=current_app)
        except NoReverseMatch:
            if self.asvar is None:
                raise
        if self.asvar:
            context[self.asvar] = url
            return ""
        return conditional_escape(url) if context.autoescape else url


@register.tag
def url(parser: Parser, token: Token) -> KeptURLNode:
    node = django_url(parser, token)
    return KeptURLNode(node.view_name, node.args, node.kwargs, node.asvar)
