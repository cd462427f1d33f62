"""A small in-memory server that speaks the parts of Grafana's HTTP API the importer uses.

Real HTTP on 127.0.0.1 (port 0): folders, data sources by uid, dashboards by uid, bearer-token
auth, and Grafana's status codes (401 bad token, 404 unknown uid, 400 bad dashboard,
412 version clash without overwrite).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.loopback_http import reply_json, serve_in_thread


class GrafanaState:
    """What the fake Grafana holds, inspected by the tests."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.folders: dict[str, dict] = {}
        self.datasources: dict[str, dict] = {}
        self.dashboards: dict[str, dict] = {}  # uid -> {"dashboard", "folderUid", "version"}
        self.requests: list[tuple[str, str]] = []


def _handler(state: GrafanaState):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args):  # keep test output quiet
            pass

        def _reply(self, code: int, body: dict) -> None:
            reply_json(self, code, body)

        def _authorised(self) -> bool:
            state.requests.append((self.command, self.path))
            if self.headers.get("Authorization") != f"Bearer {state.token}":
                self._reply(401, {"message": "Unauthorized"})
                return False
            return True

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_GET(self):
            if not self._authorised():
                return
            parts = self.path.strip("/").split("/")
            table = {("api", "folders"): state.folders, ("api", "datasources"): state.datasources,
                     ("api", "dashboards"): state.dashboards}.get(tuple(parts[:2]))
            item = table.get(parts[-1]) if table is not None else None
            if item is None:
                self._reply(404, {"message": "not found"})
            else:
                self._reply(200, item)

        def do_POST(self):
            if not self._authorised():
                return
            body = self._body()
            if self.path == "/api/folders":
                state.folders[body["uid"]] = body
                return self._reply(200, body)
            if self.path == "/api/datasources":
                state.datasources[body["uid"]] = body
                return self._reply(200, {"datasource": body})
            if self.path == "/api/dashboards/db":
                return self._dashboard(body)
            self._reply(404, {"message": "not found"})

        def do_PUT(self):
            if not self._authorised():
                return
            uid = self.path.rsplit("/", 1)[-1]
            if not self.path.startswith("/api/datasources/uid/") or uid not in state.datasources:
                return self._reply(404, {"message": "not found"})
            state.datasources[uid] = self._body()
            self._reply(200, {"message": "Datasource updated"})

        def _dashboard(self, body: dict) -> None:
            dashboard = body.get("dashboard") or {}
            if not dashboard.get("title"):
                return self._reply(400, {"message": "Dashboard title cannot be empty"})
            if body.get("folderUid") not in state.folders:
                return self._reply(400, {"message": "folder not found"})
            uid = dashboard["uid"]
            if uid in state.dashboards and not body.get("overwrite"):
                return self._reply(412, {"status": "version-mismatch"})
            version = state.dashboards.get(uid, {}).get("version", 0) + 1
            state.dashboards[uid] = {"dashboard": dashboard, "folderUid": body["folderUid"], "version": version}
            self._reply(200, {"uid": uid, "version": version, "status": "success"})

    return Handler


class FakeGrafana:
    """Context manager: `with FakeGrafana(token) as g: g.url, g.state`."""

    def __init__(self, token: str) -> None:
        self.state = GrafanaState(token)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGrafana:
        serve_in_thread(self._server)
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()
