"""The node waiter: readiness from ListClusterNodes, pagination, and the provider entry points."""

from __future__ import annotations

import json

import boto3
from botocore.stub import Stubber

from infra.constructs.handlers.node_waiter import index as waiter


def _node(group: str, status: str, i: int = 0) -> dict:
    return {"InstanceGroupName": group, "InstanceId": f"i-{group}-{i}", "InstanceType": "ml.g7e.12xlarge",
            "LaunchTime": "2026-01-01T00:00:00Z", "InstanceStatus": {"Status": status}}


def test_ready_only_when_every_group_has_its_running_nodes():
    expected = {"head": 1, "workers": 3}
    nodes = [_node("head", "Running"), *(_node("workers", "Running", i) for i in range(2)),
             _node("workers", "Pending", 3)]
    assert waiter.missing_nodes(nodes, expected) == {"workers": 1}
    nodes[-1] = _node("workers", "Running", 3)
    assert waiter.missing_nodes(nodes, expected) == {}


def test_a_group_with_no_nodes_yet_is_missing_all_of_them():
    assert waiter.missing_nodes([], {"head": 1, "workers": 3}) == {"head": 1, "workers": 3}


def test_failed_or_rebooting_nodes_do_not_count():
    nodes = [_node("head", "Failure"), _node("head", "ShuttingDown", 1)]
    assert waiter.missing_nodes(nodes, {"head": 1}) == {"head": 1}


def _client_with_pages(pages: list[dict]):
    client = boto3.client("sagemaker", region_name="us-west-2")
    stub = Stubber(client)
    for i, page in enumerate(pages):
        params = {"ClusterName": "hp", **({"NextToken": f"t{i}"} if i else {})}
        stub.add_response("list_cluster_nodes", page, params)
    return client, stub


def test_list_nodes_follows_next_tokens():
    pages = [{"ClusterNodeSummaries": [_node("head", "Running")], "NextToken": "t1"},
             {"ClusterNodeSummaries": [_node("workers", "Running")]}]
    client, stub = _client_with_pages(pages)
    with stub:
        nodes = waiter.list_nodes(client, "hp")
    assert [n["InstanceGroupName"] for n in nodes] == ["head", "workers"]


def test_is_complete_polls_until_ready():
    event = {"RequestType": "Create", "ResourceProperties": {"ClusterName": "hp",
                                                             "ExpectedNodes": json.dumps({"head": 1, "workers": 1})}}
    client, stub = _client_with_pages([{"ClusterNodeSummaries": [_node("head", "Running")]}])
    with stub:
        assert waiter.is_complete(event, client=client) == {"IsComplete": False}
    client, stub = _client_with_pages([{"ClusterNodeSummaries": [_node("head", "Running"), _node("workers", "Running")]}])
    with stub:
        assert waiter.is_complete(event, client=client) == {"IsComplete": True, "Data": {"Ready": "true"}}


def _stage_event(final: str, deadline: int) -> dict:
    props = {"ClusterName": "hp", "ExpectedNodes": json.dumps({"workers": 1}), "Stage": "1/2", "StageSeconds": "2700",
             "Final": final}
    return {"RequestType": "Create", "ResourceProperties": props, "Data": {"DeadlineEpoch": str(deadline)}}


def test_a_stage_that_is_not_the_last_hands_over_at_its_deadline():
    client, stub = _client_with_pages([{"ClusterNodeSummaries": []}])
    with stub:
        assert waiter.is_complete(_stage_event("false", 1000), client=client, now=999) == {"IsComplete": False}
    client, stub = _client_with_pages([{"ClusterNodeSummaries": []}])
    with stub:
        assert waiter.is_complete(_stage_event("false", 1000), client=client, now=1000) == {
            "IsComplete": True, "Data": {"Ready": "false"}}


def test_the_last_stage_keeps_waiting_past_its_deadline_until_the_provider_times_out():
    client, stub = _client_with_pages([{"ClusterNodeSummaries": []}])
    with stub:
        assert waiter.is_complete(_stage_event("true", 1000), client=client, now=5000) == {"IsComplete": False}


def test_on_event_sets_the_stage_deadline_for_is_complete():
    create = {"RequestType": "Create", "ResourceProperties": {"ClusterName": "hp", "Stage": "2/2",
                                                              "StageSeconds": "2700"}}
    assert waiter.on_event(create, now=100) == {"PhysicalResourceId": "nodes-hp-2of2",
                                                "Data": {"DeadlineEpoch": "2800"}}


def test_delete_never_waits():
    assert waiter.is_complete({"RequestType": "Delete", "ResourceProperties": {}}) == {"IsComplete": True}


def test_physical_id_names_the_cluster_and_stage_and_survives_updates():
    create = {"RequestType": "Create", "ResourceProperties": {"ClusterName": "hp"}}
    assert waiter.on_event(create, now=0)["PhysicalResourceId"] == "nodes-hp-1of1"
    update = {**create, "RequestType": "Update", "PhysicalResourceId": "nodes-old"}
    assert waiter.on_event(update, now=0)["PhysicalResourceId"] == "nodes-old"
