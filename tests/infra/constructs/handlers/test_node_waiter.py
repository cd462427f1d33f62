"""The node waiter: readiness from ListClusterNodes, pagination, the provider entry points, and the
capacity check that ends the wait when a group's launches keep failing for lack of capacity."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from infra.constructs.handlers.node_waiter import index as waiter
from infra.constructs.node_waiter import (
    POLL_INTERVAL,
    PROVIDER_TIMEOUT,
    STAGE_LIMIT,
    WAIT_LIMIT,
    CapacityAdvice,
)
from tests.service_shapes import filled, filled_output, service_model


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


def _client_with_pages(pages: list[dict], *, events: bool = True):
    """A client stubbed with these ListClusterNodes pages, then (while nodes are missing) an empty
    ListClusterEvents page for the capacity check."""
    client = boto3.client("sagemaker", region_name="us-west-2")
    stub = Stubber(client)
    for i, page in enumerate(pages):
        params = {"ClusterName": "hp", **({"NextToken": f"t{i}"} if i else {})}
        stub.add_response("list_cluster_nodes", page, params)
    if events:
        stub.add_response("list_cluster_events", {"Events": []})
    return client, stub


def test_list_nodes_follows_next_tokens():
    pages = [{"ClusterNodeSummaries": [_node("head", "Running")], "NextToken": "t1"},
             {"ClusterNodeSummaries": [_node("workers", "Running")]}]
    client, stub = _client_with_pages(pages, events=False)
    with stub:
        nodes = waiter.list_nodes(client, "hp")
    assert [n["InstanceGroupName"] for n in nodes] == ["head", "workers"]


def test_is_complete_polls_until_ready():
    event = {"RequestType": "Create", "ResourceProperties": {"ClusterName": "hp",
                                                             "ExpectedNodes": json.dumps({"head": 1, "workers": 1})}}
    client, stub = _client_with_pages([{"ClusterNodeSummaries": [_node("head", "Running")]}])
    with stub:
        assert waiter.is_complete(event, client=client) == {"IsComplete": False}
    client, stub = _client_with_pages([{"ClusterNodeSummaries": [_node("head", "Running"), _node("workers", "Running")]}],
                                      events=False)
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


# --- capacity: a group whose launches keep failing for lack of capacity ends the wait ------------------
#
# A fake HyperPod timeline answers each poll through botocore's Stubber: every answer is the service
# model's full shape (tests/service_shapes.py) with the fields that matter set, validated by botocore;
# every request is validated against the operation's input shape by the client itself.

CAPACITY = "We currently do not have sufficient capacity to launch new ml.g7e.12xlarge instances. Please try again."
LIFECYCLE = "Lifecycle scripts did not run successfully. To view lifecycle script logs, visit log group ..."
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ADVICE = CapacityAdvice(zone="us-west-2a", zone_fix="-c node_availability_zone=ZONE", groups={
    "head": ("ml.r5d.16xlarge", "head_instance_type"), "workers": ("ml.g7e.12xlarge", "worker_instance_type")})
EXPECTED = {"head": 1, "workers": 3}
ARN = "arn:aws:sagemaker:us-west-2:111111111111:cluster/abcdef012345"


@dataclass
class Timeline:
    """What HyperPod reports: nodes (group, launch time) and error events (group, time, failure message)."""

    nodes: list[tuple[str, datetime]] = field(default_factory=list)
    errors: list[tuple[str, datetime, str]] = field(default_factory=list)
    cluster_arn: str = ""  # the ARN the events carry (default: the cluster the waiter waits on)
    sdk: object = field(default_factory=lambda: boto3.client("sagemaker", region_name="us-west-2"))

    def client(self, now: datetime):
        """A client whose answers are this timeline as of `now`, in the order one poll asks."""
        client = self.sdk
        stub = Stubber(client)
        (template,) = filled_output("sagemaker", "ListClusterNodes")["ClusterNodeSummaries"]
        nodes = [{**template, "InstanceGroupName": group, "InstanceId": f"i-{group}-{i}", "LaunchTime": launched,
                  "InstanceStatus": {"Status": "Running", "Message": "ok"}}
                 for i, (group, launched) in enumerate(self.nodes) if launched <= now]
        stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": nodes}, {"ClusterName": "hp"})
        running = Counter(node["InstanceGroupName"] for node in nodes)
        missing = {group for group, count in EXPECTED.items() if running[group] < count}
        if not missing:
            return client, stub
        since = now - timedelta(seconds=waiter.CAPACITY_LOOKBACK_S)
        shown = sorted(((g, t, m) for g, t, m in self.errors if since < t <= now), key=lambda e: e[1], reverse=True)
        (summary,) = filled_output("sagemaker", "ListClusterEvents")["Events"]
        summaries = [{**summary, "EventId": _event_id(g, t), "ClusterName": "hp", "InstanceGroupName": g,
                      "ClusterArn": self.cluster_arn or ARN,
                      "EventTime": t, "EventLevel": "Error", "ResourceType": "Instance",
                      "Description": f"Failed to provision EC2 Instance in Cluster hp and IG {g}"}
                     for g, t, _ in shown]
        stub.add_response("list_cluster_events", {"Events": summaries}, {
            "ClusterName": "hp", "EventTimeAfter": since, "SortBy": "EventTime", "SortOrder": "Descending",
            "MaxResults": 100})
        metadata = filled(service_model("sagemaker").shape_for("InstanceMetadata"))
        for (group, _, message), summary in zip(shown, summaries, strict=True):
            if group not in missing or summary["ClusterArn"] != ARN:
                continue
            detail = filled_output("sagemaker", "DescribeClusterEvent")
            detail["EventDetails"] = {**detail["EventDetails"], **summary,
                                      "EventDetails": {"EventMetadata": {"Instance": {**metadata,
                                                                                      "FailureMessage": message}}}}
            stub.add_response("describe_cluster_event", detail, {"ClusterName": "hp", "EventId": summary["EventId"]})
        return client, stub


def _event_id(group: str, when: datetime) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{group}/{when.isoformat()}"))


def _props(stage: str = "1/4", final: str = "false") -> dict:
    return {"ClusterName": "hp", "ClusterArn": ARN, "ExpectedNodes": json.dumps(EXPECTED), "Stage": stage,
            "StageSeconds": str(int(STAGE_LIMIT.to_seconds())), "Final": final,
            "CapacityAdvice": ADVICE.to_json()}


def _poll(timeline: Timeline, now: datetime, props: dict | None = None, deadline: float = float("inf")) -> dict:
    client, stub = timeline.client(now)
    event = {"RequestType": "Create", "ResourceProperties": props or _props(), "Data": {"DeadlineEpoch": str(deadline)}}
    with stub:
        return waiter.is_complete(event, client=client, now=now.timestamp())


def _short_of_gpus(every_min: float = 4, first_min: float = 2, until_min: float = 240) -> Timeline:
    """The head runs; every launch of a worker fails for lack of capacity, every few minutes."""
    failures = [T0 + timedelta(minutes=first_min + i * every_min)
                for i in range(int((until_min - first_min) // every_min) + 1)]
    return Timeline(nodes=[("head", T0 + timedelta(minutes=3))], errors=[("workers", t, CAPACITY) for t in failures])


def _wait_through_the_stages(timeline: Timeline) -> tuple[float | None, str]:
    """Poll as the provider framework does, stage after stage, until a stage fails or the chain's
    last stage would time out. Returns (minutes from the first poll to the failure, its reason)."""
    stages = math.ceil(WAIT_LIMIT.to_seconds() / STAGE_LIMIT.to_seconds())
    now, poll = T0, POLL_INTERVAL.to_seconds()
    for number in range(1, stages + 1):
        final = number == stages
        ends = now + timedelta(seconds=(PROVIDER_TIMEOUT if final else STAGE_LIMIT).to_seconds())
        props = _props(f"{number}/{stages}", "true" if final else "false")
        deadline = (now + timedelta(seconds=STAGE_LIMIT.to_seconds())).timestamp()
        while now < ends:
            try:
                result = _poll(timeline, now, props, deadline)
            except RuntimeError as error:
                return (now - T0).total_seconds() / 60, str(error)
            now += timedelta(seconds=poll)
            if result["IsComplete"]:
                break
    return None, ""


def chain_minutes() -> float:
    """How long the stage chain waits before its last stage times out: what a capacity failure billed."""
    stages = math.ceil(WAIT_LIMIT.to_seconds() / STAGE_LIMIT.to_seconds())
    return ((stages - 1) * STAGE_LIMIT.to_seconds() + PROVIDER_TIMEOUT.to_seconds()) / 60


def test_launches_that_keep_failing_for_capacity_end_the_deploy_in_minutes_not_hours():
    minutes, reason = _wait_through_the_stages(_short_of_gpus())
    assert chain_minutes() == 185  # the wait before: 3 stages of 45 min, then the last stage's 50
    assert minutes is not None, f"the waiter waited out all {chain_minutes():.0f} min of its stages"
    # First failure at 2 min; persistent once it has lasted PERSISTENT_CAPACITY_S; one poll of slack.
    assert minutes <= 2 + (waiter.PERSISTENT_CAPACITY_S + POLL_INTERVAL.to_seconds()) / 60
    print(f"capacity failure ends the wait after {minutes:.1f} min instead of {chain_minutes():.0f} min")
    assert "instance group workers (ml.g7e.12xlarge) in us-west-2a" in reason


def test_the_reason_names_the_zone_and_type_settings_and_hyperpods_message():
    reason = ""
    with pytest.raises(RuntimeError) as stopped:
        _poll(_short_of_gpus(), T0 + timedelta(minutes=20))
    reason = str(stopped.value)
    assert re.search(r"instance group workers \(ml\.g7e\.12xlarge\) in us-west-2a: 5 launches failed for lack of "
                     r"capacity over 16 min, the last at 09:18 UTC \(.*" + re.escape(CAPACITY), reason), reason
    assert "-c node_availability_zone=ZONE" in reason and "-c worker_instance_type=TYPE" in reason
    assert "head_instance_type" not in reason  # the head launched: only the short group's setting


def test_a_short_burst_or_an_old_failure_does_not_stop_the_wait():
    burst = _short_of_gpus(every_min=2, first_min=10, until_min=18)  # 5 failures within 8 min
    assert _poll(burst, T0 + timedelta(minutes=19)) == {"IsComplete": False}
    once = Timeline(nodes=[("head", T0)], errors=[("workers", T0 + timedelta(minutes=1), CAPACITY)])
    assert _poll(once, T0 + timedelta(minutes=40)) == {"IsComplete": False}


def test_capacity_that_comes_back_lets_the_wait_go_on():
    recovered = _short_of_gpus(until_min=20)
    recovered.nodes.append(("workers", T0 + timedelta(minutes=23)))  # a launch after the last failure worked
    assert _poll(recovered, T0 + timedelta(minutes=25)) == {"IsComplete": False}
    # No failure for longer than PERSISTENT_CAPACITY_S: HyperPod is no longer failing for capacity.
    quiet = _short_of_gpus(until_min=20)
    assert _poll(quiet, T0 + timedelta(minutes=36)) == {"IsComplete": False}


def test_failures_of_an_earlier_cluster_of_the_same_name_are_not_read():
    # A rolled-back deploy's cluster failed for capacity; this cluster is new (another ARN).
    earlier = _short_of_gpus()
    earlier.cluster_arn = "arn:aws:sagemaker:us-west-2:111111111111:cluster/0123456789ab"
    assert _poll(earlier, T0 + timedelta(minutes=40)) == {"IsComplete": False}


def test_other_launch_failures_are_not_capacity():
    broken = Timeline(nodes=[("head", T0)], errors=[("workers", T0 + timedelta(minutes=m), LIFECYCLE)
                                                    for m in range(2, 40, 4)])
    assert _poll(broken, T0 + timedelta(minutes=40)) == {"IsComplete": False}


def test_failures_of_a_group_that_has_its_nodes_are_not_read():
    head_short = Timeline(nodes=[("head", T0)] + [("workers", T0)] * 2,
                          errors=[("head", T0 + timedelta(minutes=m), CAPACITY) for m in range(2, 40, 4)])
    # The stub answers no DescribeClusterEvent for the head's events: the workers alone miss a node.
    assert _poll(head_short, T0 + timedelta(minutes=40)) == {"IsComplete": False}


@pytest.mark.parametrize("code", ["AccessDeniedException", "ValidationException"])
def test_the_capacity_check_steps_aside_when_events_cannot_be_read(code):
    client = boto3.client("sagemaker", region_name="us-west-2")
    stub = Stubber(client)
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": []}, {"ClusterName": "hp"})
    stub.add_client_error("list_cluster_events", service_error_code=code, http_status_code=400)
    event = {"RequestType": "Create", "ResourceProperties": _props()}
    with stub:
        assert waiter.is_complete(event, client=client, now=T0.timestamp()) == {"IsComplete": False}


def test_describes_per_poll_are_bounded():
    many = Timeline(nodes=[("head", T0)], errors=[("workers", T0 + timedelta(seconds=30 * i), LIFECYCLE)
                                                  for i in range(60)])
    client, stub = many.client(T0 + timedelta(minutes=31))
    event = {"RequestType": "Create", "ResourceProperties": _props()}
    with stub:
        assert waiter.is_complete(event, client=client, now=(T0 + timedelta(minutes=31)).timestamp()) == {
            "IsComplete": False}
    # 60 error events listed, only the newest MAX_DESCRIBES described: the rest stay queued.
    assert len(stub._queue) == 60 - waiter.MAX_DESCRIBES


@pytest.mark.parametrize("text", [
    CAPACITY,
    "We currently do not have sufficient capacity in the Availability Zone you requested.",
    "InsufficientInstanceCapacity: We currently do not have sufficient g7e.12xlarge capacity in the Availability "
    "Zone you requested (us-west-2a).",
])
def test_capacity_wordings_are_recognised(text):
    assert waiter.CAPACITY_FAILURE.search(text)


@pytest.mark.parametrize("text", [LIFECYCLE, "EFA health checks did not run successfully",
                                  "Failed to create Customer ENI for instance in Cluster hp and IG workers"])
def test_other_failures_are_not_capacity(text):
    assert not waiter.CAPACITY_FAILURE.search(text)
