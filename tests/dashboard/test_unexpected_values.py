"""Pages never fail on values the ledger no longer accepts but an older database may hold, nor on
query strings and paths out of bounds (issue 9): an agent id no route takes, a timestamp past
year 9999, a NUL, numbers beyond any column."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from context.services import context_build
from ledger.models import Cluster, Message
from ledger.services import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db

ROUTABLE = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Work.",
    "triggers": [{"topic": "T", "action": "execute_task"}],
}


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("op", password="unused-pw-1"))
    return client


@pytest.fixture
def legacy_cluster() -> str:
    """A cluster whose stored config was saved before agent ids were checked (SPEC §4)."""
    cluster_id = cluster_create(cluster_id="legacy", config={"agents": [ROUTABLE]}).id
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="T", sender="worker"))
    context_build(cluster_id=cluster_id, agent_id="worker")
    odd = [ROUTABLE, {"id": "team/worker", "role": "x"}, {"id": 7, "role": "y"}, {"role": "z"}]
    Cluster.objects.filter(pk=cluster_id).update(config={"agents": odd})
    return cluster_id


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/clusters/legacy/",
        "/clusters/legacy/metrics/",
        "/clusters/legacy/agents/worker/",
        "/clusters/legacy/agents/worker/diff/",
    ],
)
def test_agent_ids_no_route_takes_never_break_a_page(
    operator: Client, legacy_cluster: str, path: str
) -> None:
    response = operator.get(path)

    assert response.status_code == 200


def test_an_agent_id_no_route_takes_gets_a_quoted_link(
    operator: Client, legacy_cluster: str
) -> None:
    html = operator.get("/clusters/legacy/metrics/").content.decode()

    assert 'href="/clusters/legacy/agents/team%2Fworker/"' in html
    assert operator.get("/clusters/legacy/agents/team%2Fworker/").status_code == 404


def test_a_stored_timestamp_past_year_9999_never_breaks_a_page(operator: Client) -> None:
    cluster_create(cluster_id="far")
    message_publish(cluster_id="far", draft=MessageDraft(topic="T", sender="s"))
    # As an older server stored it, before timestamps were bounded.
    Message.objects.filter(cluster_id="far").update(timestamp=2**63 - 1)
    Cluster.objects.filter(pk="far").update(last_timestamp=2**63 - 1, created_at=2**62)

    assert operator.get("/").status_code == 200
    assert operator.get("/clusters/far/").status_code == 200


@pytest.mark.parametrize(
    ("params", "shown"),
    [
        ({"since": "999999999999999999"}, "outside 1970-01-01 … 9999-12-31"),
        ({"until": "99999-01-01T00:00:00"}, "is not a date and time"),
        ({"before": str(2**64)}, "can be at most"),
        ({"after": "99999999999999999999999"}, "can be at most"),
    ],
)
def test_query_values_out_of_bounds_are_shown_and_ignored_on_the_cluster_page(
    operator: Client, legacy_cluster: str, params: dict[str, str], shown: str
) -> None:
    response = operator.get("/clusters/legacy/", params)

    assert response.status_code == 200
    assert shown in response.content.decode()


def test_an_as_of_point_beyond_any_column_is_shown_and_ignored_on_the_inspector(
    operator: Client, legacy_cluster: str
) -> None:
    response = operator.get("/clusters/legacy/agents/worker/", {"as_of": str(2**70)})

    assert response.status_code == 200
    assert "can be at most" in response.content.decode()


@pytest.mark.parametrize(
    "path",
    ["/clusters/leg%00acy/", "/clusters/legacy/?topic=T%00", "/clusters/legacy/agents/w%00/"],
)
def test_a_nul_in_a_page_path_or_query_is_400_not_500(
    operator: Client, legacy_cluster: str, path: str
) -> None:
    response = operator.get(path)

    assert response.status_code == 400
    assert "must not contain NUL" in response.content.decode()
