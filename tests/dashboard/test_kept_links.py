"""Links reversed once (``dashboard.links``, docs/decisions/0251): the same answers as
``reverse()``, kept per every input of the answer, and ``{% url %}`` answering through them."""

from __future__ import annotations

from typing import Any

import pytest
from django.template import Context, Template
from django.urls import NoReverseMatch, reverse, set_script_prefix

from dashboard import links
from dashboard.links import reverse_kept
from dashboard.templatetags.kept_links import KeptURLNode


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every call ``reverse_kept`` makes to Django's ``reverse``, on an empty store."""
    links._reversed.cache_clear()
    calls: list[tuple[Any, ...]] = []

    def counting(viewname: str, **kw: Any) -> str:
        calls.append((viewname, kw))
        return reverse(viewname, **kw)

    monkeypatch.setattr(links, "reverse", counting)
    yield calls
    links._reversed.cache_clear()


CASES: list[tuple[str, list[Any] | None, dict[str, Any] | None]] = [
    ("dashboard:clusters", None, None),
    ("dashboard:cluster", None, {"cluster_id": "c-1"}),
    ("dashboard:cluster", ["c 2 é?&"], None),
    ("dashboard:message-json", None, {"cluster_id": "c-1", "sequence": 7}),
    ("dashboard:inspector", None, {"cluster_id": "c-1", "agent_id": "worker"}),
    ("dashboard:task", None, {"task_id": "0"}),
    ("admin:index", None, None),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_the_kept_answer_is_reverses_and_is_reversed_once(
    counted: list[tuple[Any, ...]], name: str, args: Any, kwargs: Any
) -> None:
    expected = reverse(name, args=args, kwargs=kwargs)
    assert reverse_kept(name, args=args, kwargs=kwargs) == expected
    assert reverse_kept(name, args=args, kwargs=kwargs) == expected
    assert len(counted) == 1


def test_other_arguments_and_script_prefixes_are_other_answers(
    counted: list[tuple[Any, ...]],
) -> None:
    one = reverse_kept("dashboard:cluster", kwargs={"cluster_id": "c-1"})
    two = reverse_kept("dashboard:cluster", kwargs={"cluster_id": "c-2"})
    set_script_prefix("/ops/")
    try:
        prefixed = reverse_kept("dashboard:cluster", kwargs={"cluster_id": "c-1"})
        assert prefixed == reverse("dashboard:cluster", kwargs={"cluster_id": "c-1"})
    finally:
        set_script_prefix("/")
    assert (one, two, prefixed) == ("/clusters/c-1/", "/clusters/c-2/", "/ops/clusters/c-1/")
    assert len(counted) == 3
    # an int and its text are told apart (a bool is an int but not kept)
    reverse_kept("dashboard:message-json", kwargs={"cluster_id": "c-1", "sequence": 1})
    reverse_kept("dashboard:message-json", kwargs={"cluster_id": "c-1", "sequence": "1"})
    assert len(counted) == 5


def test_arguments_other_than_texts_and_ints_are_reversed_every_time(
    counted: list[tuple[Any, ...]],
) -> None:
    class Changing:
        text = "a"

        def __str__(self) -> str:
            return self.text

    value = Changing()
    assert reverse_kept("dashboard:cluster", args=[value]) == "/clusters/a/"
    value.text = "b"
    assert reverse_kept("dashboard:cluster", args=[value]) == "/clusters/b/"
    assert reverse_kept("dashboard:cluster", kwargs={"cluster_id": True}) == "/clusters/True/"
    assert reverse_kept("dashboard:cluster", kwargs={"cluster_id": True}) == "/clusters/True/"
    assert len(counted) == 4


def test_no_match_is_raised_every_time_and_never_kept(counted: list[tuple[Any, ...]]) -> None:
    for _ in range(2):
        with pytest.raises(NoReverseMatch):
            reverse_kept("dashboard:inspector", kwargs={"cluster_id": "c", "agent_id": "a/b"})
    assert len(counted) == 2


def test_the_url_tag_is_the_kept_one_and_writes_what_djangos_writes(
    counted: list[tuple[Any, ...]],
) -> None:
    source = (
        "{% url 'dashboard:cluster' cid %}|{% url 'dashboard:cluster' cluster_id=cid %}"
        "|{% url 'dashboard:message-json' cid 3 as json %}{{ json }}"
        "|{% url 'dashboard:nothing' as none %}[{{ none }}]"
        "|{% autoescape off %}{% url 'dashboard:cluster' cid %}{% endautoescape %}"
    )
    template = Template(source)
    assert any(isinstance(node, KeptURLNode) for node in template.nodelist)
    context = {"cid": "a&b"}
    html = template.render(Context(context))
    assert html == (
        "/clusters/a&amp;b/|/clusters/a&amp;b/|/clusters/a&amp;b/messages/3.json|[]|/clusters/a&b/"
    )
    assert template.render(Context(context)) == html
    # the second rendering reversed only the name that matches nothing: it is never kept
    assert len(counted) == 5
    with pytest.raises(NoReverseMatch):
        Template("{% url 'dashboard:nothing' %}").render(Context({}))
