"""A cluster's config read from its row is parsed once per stored text and shared, frozen
(ledger/frozen.py, docs/decisions/0236)."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

from ledger.frozen import FrozenDict, FrozenList, frozen
from ledger.models import Cluster
from ledger.selectors import cluster_get, cluster_record
from ledger.services import cluster_create
from ledger.statements import pipeline_cluster

pytestmark = pytest.mark.django_db

CONFIG: dict[str, Any] = {
    "agents": [
        {"id": "w", "role": "implementation", "prompt": "Work.", "triggers": [{"topic": "GO"}]}
    ],
    "contextRules": {"maxTokens": 1000},
}


def test_reads_of_an_unchanged_config_share_one_parse_that_refuses_changes() -> None:
    # given a cluster
    cluster_create(cluster_id="c1", config=CONFIG, state="running")
    # when its row is read twice
    first, second = cluster_get(cluster_id="c1"), cluster_get(cluster_id="c1")
    # then both hold one parse, equal to the stored config and to the ORM's reading of it
    assert first.config is second.config
    assert first.config == CONFIG == cluster_record(Cluster.objects.get(pk="c1")).config
    assert json.dumps(first.config) == json.dumps(CONFIG)
    # and no reader can change it for the others, at any depth
    agent = first.config["agents"][0]
    for change in (
        lambda: first.config.__setitem__("agents", []),
        lambda: first.config.setdefault("x", 1),
        lambda: first.config["agents"].append({}),
        lambda: agent.update(prompt="Other."),
        lambda: agent["triggers"][0].pop("topic"),
    ):
        with pytest.raises(TypeError):
            change()
    assert second.config == CONFIG


def test_a_changed_config_is_read_anew() -> None:
    # given a cluster whose config was read
    cluster_create(cluster_id="c1", config=CONFIG, state="running")
    before = cluster_get(cluster_id="c1")
    # when its config changes
    changed = {**CONFIG, "agents": [{**CONFIG["agents"][0], "prompt": "Rework."}]}
    Cluster.objects.filter(pk="c1").update(config=changed, config_version=2)
    Cluster.objects.filter(pk="c1").update(last_sequence=1)  # a turn for the pipeline's read
    # then both reads of the row give the new one
    after = cluster_get(cluster_id="c1")
    found = pipeline_cluster(cluster_id="c1")
    assert found is not None
    assert after.config == changed == found[0].config
    assert (after.config_version, before.config["agents"][0]["prompt"]) == (2, "Work.")


def test_a_copy_of_a_frozen_value_is_a_plain_one() -> None:
    value = frozen(json.loads(json.dumps(CONFIG)))
    assert isinstance(value, FrozenDict)
    assert isinstance(value["agents"], FrozenList)
    for made in (
        copy.deepcopy(value),
        pickle.loads(pickle.dumps(value)),
        json.loads(json.dumps(value)),
    ):
        assert made == CONFIG
        assert type(made) is dict
        assert type(made["agents"]) is list
        made["agents"][0]["prompt"] = "Changed."  # a copy changes; the shared value does not
    assert value == CONFIG
    assert type(dict(value)) is dict
    assert type(value.copy()) is dict
    assert type(copy.copy(value)) is dict
    assert type(list(value["agents"])) is list
