"""A loopback stand-in for the Hugging Face Hub's download endpoints, for huggingface_hub's own client.

It answers the three calls ``snapshot_download`` makes (the revision's commit, its file tree, each file by
HEAD then GET with ``Range`` for a resume) for one repository held in memory. ``cut_downloads`` makes that
many GETs of the largest file stop halfway, as a dropped connection or a killed job does.
"""

from __future__ import annotations

import http.server
import re

from tests.loopback_http import reply_json, serve_in_thread

COMMIT = "c0ffee" + "0" * 34
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<name>.+)$")


class HubStandin(http.server.ThreadingHTTPServer):
    def __init__(self, repo_id: str, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repo_id, self.files, self.cut_downloads = repo_id, files, 0
        self.largest = max(files, key=lambda name: len(files[name]))
        serve_in_thread(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: HubStandin

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._file(send_body=False)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith(f"/api/models/{self.server.repo_id}/tree/"):
            self._json([{"type": "file", "path": name, "size": len(body), "oid": f"{len(body):040x}"}
                        for name, body in self.server.files.items()])
        elif path.startswith(f"/api/models/{self.server.repo_id}/revision/"):
            self._json({"id": self.server.repo_id, "sha": COMMIT,
                        "siblings": [{"rfilename": name} for name in self.server.files]})
        else:
            self._file(send_body=True)

    def _json(self, document) -> None:
        reply_json(self, 200, document)

    def _file(self, *, send_body: bool) -> None:
        found = RESOLVE.match(self.path.split("?")[0])
        if not found or found["repo"] != self.server.repo_id or found["name"] not in self.server.files:
            self.send_error(404)
            return
        body = self.server.files[found["name"]]
        start = int(re.match(r"bytes=(\d+)-", self.headers.get("Range", "bytes=0-"))[1]) if send_body else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{len(body):x}"')
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if not send_body:
            return
        if found["name"] == self.server.largest and self.server.cut_downloads > 0:
            self.server.cut_downloads -= 1
            self.wfile.write(body[start:][: (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body[start:])
