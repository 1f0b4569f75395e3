"""The context inspector, the build diff and the metrics page through Django's test client."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from context.services import context_build
from ledger.interfaces import MessageDraft, cluster_create, message_publish, message_publish_batch

pytestmark = pytest.mark.django_db

XSS = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>"

WORKER: dict[str, Any] = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Implement the issue.",
    "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    "contextStrategy": {
        "maxTokens": 2000,
        "sources": [
            {"topic": "ISSUE_OPENED", "priority": "required", "amount": 1},
            {"topic": "NOTES", "amount": 3, "priority": "medium"},
        ],
    },
}
VALIDATOR: dict[str, Any] = {
    "id": "validator",
    "role": "validator",
    "prompt": "Check it.",
    "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    "contextStrategy": {"sources": [{"topic": "ISSUE_OPENED", "priority": "required"}]},
}


def publish(cluster_id: str, topic: str, text: str, sender: str = "someone") -> int:
    draft = MessageDraft(topic=topic, sender=sender, content={"text": text})
    return message_publish(cluster_id=cluster_id, draft=draft).sequence


def make_cluster(cluster_id: str = "c1", *, issue: str = "Fix the login rate limit") -> str:
    cid = cluster_create(cluster_id=cluster_id, config={"agents": [WORKER, VALIDATOR]}).id
    publish(cid, "NOTES", "first note " + "n" * 400)
    publish(cid, "NOTES", "second note " + "n" * 400)
    publish(cid, "ISSUE_OPENED", issue, sender="system")
    return cid


@pytest.fixture
def operator(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("op", password="pw-for-tests-1"))
    return client


def inspector(cid: str, agent: str = "worker") -> str:
    return reverse("dashboard:inspector", kwargs={"cluster_id": cid, "agent_id": agent})


def diff_url(cid: str, agent: str = "worker") -> str:
    return reverse("dashboard:build_diff", kwargs={"cluster_id": cid, "agent_id": agent})


def metrics_url(cid: str) -> str:
    return reverse("dashboard:metrics", kwargs={"cluster_id": cid})


def table_row(html: str, pack_id: str) -> str:
    match = re.search(
        r'<tr class="decision[^"]*"[^>]*>\s*<td[^>]*>\d+</td>\s*'
        rf"<th[^>]*><code>{re.escape(pack_id)}</code>.*?</tr>",
        html,
        re.S,
    )
    assert match, f"no decision row for {pack_id}"
    return match.group(0)


def test_pages_need_a_signed_in_operator(client: Client) -> None:
    cid = make_cluster()

    for url in (inspector(cid), diff_url(cid), metrics_url(cid)):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_inspector_shows_the_bar_the_decisions_and_the_prompt(operator: Client) -> None:
    cid = make_cluster()

    response = operator.get(inspector(cid))

    html = response.content.decode()
    assert response.status_code == 200
    assert '<svg class="bb-bar"' in html
    # header, instructions, notes, trigger (the issue is the trigger: its source is empty)
    assert html.count('class="seg seg-') == 4
    assert 'tabindex="0"' in html
    row = table_row(html, "source:NOTES:1")
    assert "full — fits in the" in row
    assert "after required packs" in row
    assert '<td class="num" data-label="Tokens">' in row
    # the issue's own source: its only match is the trigger, which has a pack of its own
    assert (
        "skipped — its only match is the triggering message ISSUE_OPENED #3, which the prompt "
        "carries once, in triggeringMessage"
    ) in table_row(html, "source:ISSUE_OPENED:0")
    assert '<details class="pack-block' in html
    assert "## Messages from topic: NOTES" in html
    assert "No builds yet" in html
    assert response["Vary"].count("HX-Request") == 1


def test_max_tokens_of_one_skips_optional_packs_with_a_reason(operator: Client) -> None:
    cid = make_cluster()

    html = operator.get(inspector(cid), {"max_tokens": "1"}).content.decode()

    row = table_row(html, "source:NOTES:1")
    assert "skipped" in row
    assert "fit in the budget: nothing was left after required packs" in row
    assert "Left out" in html
    assert "over budget" in html
    assert 'class="seg seg-required look-full over"' in html


def test_a_pack_that_falls_back_to_compact_says_so(operator: Client) -> None:
    cid = make_cluster()
    # Required packs take 191 tokens; the notes are 233 tokens in full, 121 as compact.
    html = operator.get(inspector(cid), {"max_tokens": "350"}).content.decode()

    row = table_row(html, "source:NOTES:1")
    assert "compact — full (" in row
    assert "did not fit in the" in row
    assert "compact used" in row
    assert "look-compact" in html
    assert '<span class="tag tag-compact">compact</span>' in row


def test_as_of_hides_later_messages(operator: Client) -> None:
    cid = make_cluster()
    early = publish(cid, "NOTES", "early-marker")
    publish(cid, "NOTES", "late-marker")

    now = operator.get(inspector(cid)).content.decode()
    then = operator.get(inspector(cid), {"as_of": str(early)}).content.decode()

    assert "late-marker" in now
    assert "early-marker" in then
    assert "late-marker" not in then.split('id="inspector-region"')[1].split("</section>")[0]
    assert f'<option value="{early}" selected>' in then


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": "abc"}, "Max tokens must be a whole number"),
        ({"max_tokens": "0"}, "Max tokens must be at least 1"),
        ({"max_tokens": "-5"}, "Max tokens must be at least 1"),
        ({"max_tokens": "99999999999"}, "Max tokens can be at most"),
        ({"as_of": "xyz"}, "The as-of point must be a whole number"),
        ({"as_of": "0"}, "The as-of point must be at least 1"),
        ({"as_of": "9999"}, "This cluster has no message #9,999"),
    ],
)
def test_bad_what_if_values_show_an_inline_error(
    operator: Client, params: dict[str, str], message: str
) -> None:
    cid = make_cluster()

    response = operator.get(inspector(cid), params)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'role="alert"' in html
    assert message in html
    assert '<svg class="bb-bar"' in html  # the build still shows, without the bad value


def test_a_cluster_without_messages_explains_instead_of_failing(operator: Client) -> None:
    cid = cluster_create(cluster_id="empty", config={"agents": [WORKER]}).id

    response = operator.get(inspector(cid))

    assert response.status_code == 200
    assert "No preview:" in response.content.decode()


def test_unknown_agent_or_cluster_is_a_404(operator: Client) -> None:
    cid = make_cluster()

    assert operator.get(inspector(cid, "nobody")).status_code == 404
    assert operator.get(inspector("no-such-cluster")).status_code == 404
    assert operator.get(diff_url(cid, "nobody")).status_code == 404
    assert operator.get(diff_url("no-such-cluster")).status_code == 404
    assert operator.get(metrics_url("no-such-cluster")).status_code == 404


def test_htmx_gets_only_the_region_with_out_of_band_errors(operator: Client) -> None:
    cid = make_cluster()

    response = operator.get(inspector(cid), {"max_tokens": "zero"}, headers={"HX-Request": "true"})

    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert html.lstrip().startswith('<section id="inspector-region"')
    assert '<p id="max-tokens-error" class="field-error" hx-swap-oob="true">' in html
    assert "Recorded builds" not in html
    restore = operator.get(
        inspector(cid), headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )
    assert "<html" in restore.content.decode()


def test_agent_text_is_escaped_in_the_table_page_and_the_prompt(operator: Client) -> None:
    cid = make_cluster(issue=XSS)
    publish(cid, "NOTES", XSS)

    html = operator.get(inspector(cid)).content.decode()

    assert XSS not in html
    assert "<script>window.__xss" not in html
    assert "<img src=x" not in html
    assert (
        "&lt;script&gt;window.__xss=1&lt;/script&gt;&lt;img src=x onerror=window.__xss=2&gt;"
        in html
    )
    assert 'class="decision' in html


def two_builds(cid: str) -> tuple[int, int]:
    first = context_build(cluster_id=cid, agent_id="worker", max_tokens=1)
    publish(cid, "NOTES", "a third note")
    second = context_build(cluster_id=cid, agent_id="worker")
    assert first.build_id is not None
    assert second.build_id is not None
    return first.build_id, second.build_id


def test_diff_shows_added_and_dropped_packs_and_the_text_diff(operator: Client) -> None:
    cid = make_cluster()
    a, b = two_builds(cid)

    forward = operator.get(diff_url(cid), {"a": a, "b": b}).content.decode()
    backward = operator.get(diff_url(cid), {"a": b, "b": a}).content.decode()

    assert re.search(
        r"<code>source:NOTES:1</code></th>\s*<td[^>]*><span class=\"tag tag-added\">", forward
    )
    assert re.search(
        r"<code>source:NOTES:1</code></th>\s*<td[^>]*><span class=\"tag tag-dropped\">", backward
    )
    assert '<span class="dl dl-add">+a third note</span>' in forward
    assert '<span class="dl dl-del">-Iteration: 1</span>' in forward
    assert forward.count('<svg class="bb-bar"') == 2


def test_diff_asks_for_two_builds_and_reports_bad_ids(operator: Client) -> None:
    cid = make_cluster()
    a, _ = two_builds(cid)
    other = context_build(cluster_id=cid, agent_id="validator").build_id

    assert "Pick two recorded builds" in operator.get(diff_url(cid)).content.decode()
    for params, message in [
        ({"a": "x", "b": a}, "Build A must be a whole number"),
        ({"a": a, "b": 424242}, "Build 424,242 is not a recorded build of worker"),
        ({"a": a, "b": other}, f"Build {other} is not a recorded build of worker"),
    ]:
        response = operator.get(diff_url(cid), params)
        assert response.status_code == 200
        assert message in response.content.decode()


def test_the_inspector_lists_recorded_builds_to_compare(operator: Client) -> None:
    cid = make_cluster()
    a, b = two_builds(cid)

    html = operator.get(inspector(cid)).content.decode()

    assert f'name="a" value="{a}" aria-label="Build {a} as A" checked' in html
    assert f'name="b" value="{b}" aria-label="Build {b} as B" checked' in html
    assert diff_url(cid) in html
    # each build names the config version it was made under (SPEC §7.7), linked to the
    # cluster as of that version
    assert html.count(f'href="/clusters/{cid}/?config_version=1"') == 2


def test_metrics_draws_a_bar_per_build_with_a_text_alternative(operator: Client) -> None:
    cid = make_cluster()
    two_builds(cid)
    context_build(cluster_id=cid, agent_id="validator")

    html = operator.get(metrics_url(cid)).content.decode()

    assert html.count('<svg class="chart chart-tokens"') == 2
    assert html.count('<g class="col"') == 3
    assert html.count('<rect class="c-over" x=') == 1  # the max_tokens=1 build, past its budget
    assert html.count('class="marker marker-over" points="0,-5') == 1
    assert 'data-describe="iteration 2 · ' in html
    assert "2 builds; the latest used" in html
    assert '<th scope="col" class="num">Tokens</th>' in html
    # the summary above the charts and the per-agent table
    assert "<dt>Builds</dt><dd>3<" in html
    assert "<dt>◆ Over budget</dt><dd>1<" in html
    assert html.count('<th scope="row" class="card-title"><a class="mono"') == 2


def test_metrics_empty_state(operator: Client) -> None:
    cid = make_cluster()

    html = operator.get(metrics_url(cid)).content.decode()

    assert (
        f"No builds yet — an agent calls <code>POST /api/v1/clusters/{cid}/context</code>" in html
    )
    assert inspector(cid) in html


def fill(cid: str, n: int) -> None:
    for start in range(0, n, 500):
        message_publish_batch(
            cluster_id=cid,
            drafts=[
                MessageDraft(
                    topic=("NOTES", "CHATTER")[i % 2], sender="w", content={"text": f"m{i}"}
                )
                for i in range(start, min(n, start + 500))
            ],
        )


@pytest.mark.parametrize("messages", [50, 1000])
def test_page_query_counts_do_not_grow_with_the_ledger(  # type: ignore[no-untyped-def]
    operator: Client, django_assert_num_queries, messages: int
) -> None:
    cid = make_cluster()
    fill(cid, messages)
    a, b = two_builds(cid)
    publish(cid, "ISSUE_OPENED", "Again", sender="system")

    # session, user, cluster; the preview (cluster, trigger, previous build, the guidance
    # mailbox: two seeks in one statement, one query per source: two); then the as-of choices
    # and the builds
    with django_assert_num_queries(11):
        assert operator.get(inspector(cid), {"max_tokens": "300"}).status_code == 200
    # htmx re-renders only the region: no as-of choices, no build list
    with django_assert_num_queries(9):
        operator.get(inspector(cid), headers={"HX-Request": "true"})
    # as of a sequence adds the look-up of that message
    with django_assert_num_queries(12):
        operator.get(inspector(cid), {"as_of": "3"})
    # a chosen trigger: its sequence turned into its id, then the build reads it by id with
    # the guidance mailbox, in one statement (docs/decisions/0297)
    with django_assert_num_queries(11):
        operator.get(inspector(cid), {"trigger": "3"})
    # session, user, cluster, build A, build B, the build list
    with django_assert_num_queries(6):
        assert operator.get(diff_url(cid), {"a": a, "b": b}).status_code == 200
    # session, user, cluster, the builds
    with django_assert_num_queries(4):
        assert operator.get(metrics_url(cid)).status_code == 200


def test_without_a_trigger_topic_message_the_preview_says_so_and_offers_to_pick(
    operator: Client,
) -> None:
    cid = cluster_create(cluster_id="c1", config={"agents": [WORKER]}).id
    publish(cid, "NOTES", "a note, not an issue")
    seq = publish(cid, "CHATTER", "the newest message of all")

    html = operator.get(inspector(cid)).content.decode()
    picked = operator.get(inspector(cid), {"trigger": "1"}).content.decode()
    unknown = operator.get(inspector(cid), {"trigger": "99"}).content.decode()

    assert "No ISSUE_OPENED message yet" in html
    assert f"<code>CHATTER</code> #{seq}" in html
    assert 'href="#trigger" data-skip>Pick the triggering message</a>' in html
    assert '<option value="">The newest ISSUE_OPENED</option>' in html
    assert f'<option value="{seq}">#{seq} · CHATTER · someone</option>' in html
    # the operator's own choice is no stand-in
    assert "No ISSUE_OPENED message yet" not in picked
    assert "triggered by <code>NOTES</code>\n    #1" in picked
    assert '<option value="1" selected>' in picked
    assert "This cluster has no message #99" in unknown


def test_the_bar_the_table_and_the_builds_say_one_total(operator: Client) -> None:
    cid = make_cluster()
    build = context_build(cluster_id=cid, agent_id="worker")

    html = operator.get(inspector(cid)).content.decode()
    total = build.metrics["total"]["estimatedTokens"]

    assert build.metrics["budget"]["finalTokens"] == total
    assert f"<strong>{total:,}</strong> of 2,000 tokens" in html  # the bar's caption
    assert f'data-label="Tokens"><strong>{total:,}</strong>' in html  # the table's total
    assert f'title="{total:,} of 2,000 tokens">{total:,}' in html  # the recorded build
