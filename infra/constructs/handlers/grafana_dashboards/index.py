"""Custom resource: import every dashboard JSON of the deploy into the Grafana workspace.

On each create/update (any dashboard, the workspace or the data source changes) it mints a
short-lived Grafana service-account token, ensures the Prometheus data source and the folder,
posts every dashboard with `overwrite: true`, and deletes the token again.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass

SERVICE_ACCOUNT = "skymaze-dashboards"
TOKEN_TTL_S = 600  # the import takes seconds; the token dies on its own if the delete fails
HTTP_TIMEOUT_S = 30
PROMETHEUS_UID = "prometheus"  # the dashboards' data source uid


class GrafanaError(RuntimeError):
    """A Grafana HTTP API call failed; the message has the method, path, status and body."""


@dataclass(frozen=True)
class Grafana:
    """The few Grafana HTTP API calls this resource needs, authenticated with a bearer token."""

    base_url: str
    token: str

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.base_url.rstrip('/')}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                     "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise GrafanaError(f"{method} {path}: HTTP {exc.code}: {detail}") from None

    def exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except GrafanaError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True


def ensure_folder(grafana: Grafana, *, uid: str, title: str) -> None:
    """Create the dashboards' folder unless it exists."""
    if not grafana.exists(f"/api/folders/{uid}"):
        grafana.request("POST", "/api/folders", {"uid": uid, "title": title})


def prometheus_datasource(*, url: str, region: str) -> dict:
    """Managed Prometheus as a Grafana data source, signed with the workspace's IAM role."""
    return {
        "uid": PROMETHEUS_UID, "name": "Amazon Managed Prometheus", "type": "prometheus", "access": "proxy",
        "url": url.rstrip("/"), "isDefault": True,
        "jsonData": {"sigV4Auth": True, "sigV4AuthType": "ec2_iam_role", "sigV4Region": region, "httpMethod": "POST"},
    }


def ensure_datasource(grafana: Grafana, datasource: dict) -> None:
    """Create the data source, or update it in place when it exists (same uid)."""
    path = f"/api/datasources/uid/{datasource['uid']}"
    if grafana.exists(path):
        grafana.request("PUT", path, datasource)
    else:
        grafana.request("POST", "/api/datasources", datasource)


def import_dashboards(grafana: Grafana, dashboards: Iterable[dict], *, folder_uid: str) -> list[str]:
    """Post each dashboard (overwriting by uid); returns the uids in order."""
    uids = []
    for dashboard in dashboards:
        if not dashboard.get("uid") or not dashboard.get("title"):
            raise ValueError(f"dashboard without uid/title: {str(dashboard)[:80]}")
        body = {"dashboard": {**dashboard, "id": None}, "folderUid": folder_uid, "overwrite": True,
                "message": "imported on deploy"}
        grafana.request("POST", "/api/dashboards/db", body)
        uids.append(dashboard["uid"])
    return uids


def read_dashboards(zip_bytes: bytes) -> list[dict]:
    """Every `*.json` of the dashboards asset (a zip of infra/dashboards/), sorted by name."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
        names = sorted(n for n in archive.namelist() if n.endswith(".json"))
        return [json.loads(archive.read(n)) for n in names]


def mint_token(client, workspace_id: str, token_name: str) -> tuple[str, str, str]:
    """(service account id, token id, token key) of a fresh short-lived ADMIN token."""
    accounts = client.list_workspace_service_accounts(workspaceId=workspace_id)["serviceAccounts"]
    account_id = next((a["id"] for a in accounts if a["name"] == SERVICE_ACCOUNT), None)
    if account_id is None:
        account_id = client.create_workspace_service_account(
            workspaceId=workspace_id, name=SERVICE_ACCOUNT, grafanaRole="ADMIN")["id"]
    token = client.create_workspace_service_account_token(
        workspaceId=workspace_id, serviceAccountId=account_id, name=token_name, secondsToLive=TOKEN_TTL_S,
    )["serviceAccountToken"]
    return account_id, token["id"], token["key"]


def workspace_url(endpoint: str) -> str:
    """The workspace's base URL: CloudFormation gives a bare host name (g-xxx.grafana-workspace...)."""
    return endpoint if endpoint.startswith(("http://", "https://")) else f"https://{endpoint}"


def apply(props: dict, *, grafana_client, s3_client, token_name: str) -> list[str]:
    """The whole import for one create/update; the token is deleted however it ends."""
    zipped = s3_client.get_object(Bucket=props["DashboardsBucket"], Key=props["DashboardsKey"])["Body"].read()
    dashboards = read_dashboards(zipped)
    account_id, token_id, key = mint_token(grafana_client, props["WorkspaceId"], token_name)
    try:
        grafana = Grafana(base_url=workspace_url(props["WorkspaceEndpoint"]), token=key)
        ensure_datasource(grafana, prometheus_datasource(url=props["PrometheusUrl"], region=props["Region"]))
        ensure_folder(grafana, uid=props["FolderUid"], title=props["FolderTitle"])
        return import_dashboards(grafana, dashboards, folder_uid=props["FolderUid"])
    finally:
        grafana_client.delete_workspace_service_account_token(
            workspaceId=props["WorkspaceId"], serviceAccountId=account_id, tokenId=token_id)


def on_event(event: dict, context: object = None) -> dict:
    """CloudFormation entry point; deleting leaves the dashboards (the workspace goes with the stack)."""
    physical_id = f"dashboards-{event['ResourceProperties']['WorkspaceId']}"
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id)}
    import boto3

    token_name = f"deploy-{getattr(context, 'aws_request_id', 'local')}"[:64]
    uids = apply(event["ResourceProperties"], grafana_client=boto3.client("grafana"), s3_client=boto3.client("s3"),
                 token_name=token_name)
    print(f"imported dashboards: {uids}", flush=True)
    return {"PhysicalResourceId": physical_id, "Data": {"Dashboards": ",".join(uids)}}
