"""The dashboards importer against a local HTTP server speaking Grafana's API (no mocks of HTTP)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from infra.constructs.handlers.grafana_dashboards import index as importer
from tests.conftest import ROOT
from tests.infra.constructs.handlers.grafana_server import FakeGrafana

TOKEN = "glsa_test_token"
DASHBOARDS = sorted((ROOT / "infra" / "dashboards").glob("*.json"))


def _repo_dashboards() -> list[dict]:
    return [json.loads(p.read_text()) for p in DASHBOARDS]


def _zip(paths: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in paths:
            archive.write(path, path.name)
        archive.writestr("README.txt", "not a dashboard")
    return buffer.getvalue()


def test_imports_datasource_folder_and_every_dashboard_of_the_repository():
    with FakeGrafana(TOKEN) as grafana:
        client = importer.Grafana(base_url=grafana.url, token=TOKEN)
        importer.ensure_datasource(client, importer.prometheus_datasource(
            url="https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/", region="us-west-2"))
        importer.ensure_folder(client, uid="skymaze", title="skymaze")
        uids = importer.import_dashboards(client, _repo_dashboards(), folder_uid="skymaze")
        state = grafana.state
    assert uids and all(uid.startswith("skymaze-") for uid in uids)
    assert set(state.dashboards) == set(uids)
    assert all(d["folderUid"] == "skymaze" for d in state.dashboards.values())
    datasource = state.datasources["prometheus"]
    assert datasource["url"] == "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1"
    assert datasource["jsonData"]["sigV4Auth"] is True


def test_a_second_deploy_overwrites_in_place_and_updates_the_datasource():
    with FakeGrafana(TOKEN) as grafana:
        client = importer.Grafana(base_url=grafana.url, token=TOKEN)
        for region in ("us-west-2", "us-east-1"):
            importer.ensure_datasource(client, importer.prometheus_datasource(url="https://amp/", region=region))
            importer.ensure_folder(client, uid="f", title="f")
            importer.import_dashboards(client, _repo_dashboards(), folder_uid="f")
        state = grafana.state
    assert {d["version"] for d in state.dashboards.values()} == {2}
    assert len(state.dashboards) == len(DASHBOARDS)
    assert state.datasources["prometheus"]["jsonData"]["sigV4Region"] == "us-east-1"
    assert ("PUT", "/api/datasources/uid/prometheus") in state.requests
    assert sum(1 for r in state.requests if r == ("POST", "/api/folders")) == 1


def test_a_wrong_token_fails_with_the_http_status():
    with FakeGrafana(TOKEN) as grafana:
        client = importer.Grafana(base_url=grafana.url, token="expired")
        with pytest.raises(importer.GrafanaError, match=r"GET /api/folders/f: HTTP 401"):
            importer.ensure_folder(client, uid="f", title="f")


def test_a_dashboard_grafana_rejects_fails_the_deploy():
    with FakeGrafana(TOKEN) as grafana:
        client = importer.Grafana(base_url=grafana.url, token=TOKEN)
        with pytest.raises(importer.GrafanaError, match=r"POST /api/dashboards/db: HTTP 400"):
            importer.import_dashboards(client, [{"uid": "x", "title": "x"}], folder_uid="missing")


def test_a_dashboard_without_uid_is_refused_before_any_request():
    with pytest.raises(ValueError, match="dashboard without uid/title"):
        importer.import_dashboards(importer.Grafana(base_url="http://127.0.0.1:9", token=TOKEN),
                                   [{"title": "no uid"}], folder_uid="f")


def test_reads_only_the_json_files_of_the_asset_zip():
    dashboards = importer.read_dashboards(_zip(DASHBOARDS))
    assert [d["uid"] for d in dashboards] == [json.loads(p.read_text())["uid"] for p in DASHBOARDS]


@mock_aws
def test_apply_mints_a_short_lived_token_imports_and_always_deletes_the_token():
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="assets", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="assets", Key="dash.zip", Body=_zip(DASHBOARDS))
    grafana_api = boto3.client("grafana", region_name="us-west-2")
    with FakeGrafana(TOKEN) as grafana, Stubber(grafana_api) as stub:
        ws = {"workspaceId": "g-123"}
        stub.add_response("list_workspace_service_accounts", {"serviceAccounts": [], "workspaceId": "g-123"}, ws)
        stub.add_response("create_workspace_service_account",
                          {"id": "7", "name": importer.SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": "g-123"},
                          {**ws, "name": importer.SERVICE_ACCOUNT, "grafanaRole": "ADMIN"})
        stub.add_response("create_workspace_service_account_token",
                          {"serviceAccountToken": {"id": "t1", "name": "deploy-1", "key": TOKEN},
                           "serviceAccountId": "7", "workspaceId": "g-123"},
                          {**ws, "serviceAccountId": "7", "name": "deploy-1", "secondsToLive": importer.TOKEN_TTL_S})
        stub.add_response("delete_workspace_service_account_token",
                          {"serviceAccountId": "7", "tokenId": "t1", "workspaceId": "g-123"},
                          {**ws, "serviceAccountId": "7", "tokenId": "t1"})
        props = {"WorkspaceId": "g-123", "WorkspaceEndpoint": grafana.url, "PrometheusUrl": "https://amp/",
                 "Region": "us-west-2", "DashboardsBucket": "assets", "DashboardsKey": "dash.zip",
                 "FolderUid": "skymaze", "FolderTitle": "skymaze"}
        uids = importer.apply(props, grafana_client=grafana_api, s3_client=s3, token_name="deploy-1")
        stub.assert_no_pending_responses()
        assert set(uids) == set(grafana.state.dashboards)


@mock_aws
def test_the_token_is_deleted_even_when_grafana_refuses_it():
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="assets", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="assets", Key="dash.zip", Body=_zip(DASHBOARDS))
    grafana_api = boto3.client("grafana", region_name="us-west-2")
    with FakeGrafana(TOKEN) as grafana, Stubber(grafana_api) as stub:
        ws = {"workspaceId": "g-1"}
        stub.add_response("list_workspace_service_accounts",
                          {"serviceAccounts": [{"id": "7", "name": importer.SERVICE_ACCOUNT, "grafanaRole": "ADMIN",
                                                "isDisabled": "false"}], "workspaceId": "g-1"}, ws)
        stub.add_response("create_workspace_service_account_token",
                          {"serviceAccountToken": {"id": "t9", "name": "n", "key": "wrong"},
                           "serviceAccountId": "7", "workspaceId": "g-1"},
                          {**ws, "serviceAccountId": "7", "name": "n", "secondsToLive": importer.TOKEN_TTL_S})
        stub.add_response("delete_workspace_service_account_token",
                          {"serviceAccountId": "7", "tokenId": "t9", "workspaceId": "g-1"},
                          {**ws, "serviceAccountId": "7", "tokenId": "t9"})
        props = {"WorkspaceId": "g-1", "WorkspaceEndpoint": grafana.url, "PrometheusUrl": "https://amp/",
                 "Region": "us-west-2", "DashboardsBucket": "assets", "DashboardsKey": "dash.zip",
                 "FolderUid": "f", "FolderTitle": "f"}
        with pytest.raises(importer.GrafanaError, match="HTTP 401"):
            importer.apply(props, grafana_client=grafana_api, s3_client=s3, token_name="n")
        stub.assert_no_pending_responses()


def test_delete_leaves_grafana_alone():
    event = {"RequestType": "Delete", "PhysicalResourceId": "dashboards-g-1", "ResourceProperties": {"WorkspaceId": "g-1"}}
    assert importer.on_event(event) == {"PhysicalResourceId": "dashboards-g-1"}
