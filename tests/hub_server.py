"""A Hub-compatible HTTP server on 127.0.0.1 for the tests: the routes the real `huggingface_hub` client calls to create
a model repo and commit files (`create_repo`, `validate-yaml`, `preupload`, `commit` with every file "regular", i.e.
base64 inside the ndjson commit), `whoami`, and the ones `from_pretrained` and `snapshot_download` read (repo info, tree,
`resolve` with HEAD and GET). Repos live in memory: `{repo_id: (commit sha, {path: bytes})}`, a Space's
id as `spaces/<id>` (the routes `evaluate.load` reads a metric's script by).

No open-source server takes uploads (olah, which mirrors downloads, answers a missing optional file with 401, which
transformers cannot tell from a missing repo), so both sides are this small implementation; what the client expects
of each route is in ../shared/HF_NOTES.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"
KIND = r"(?P<kind>models|spaces)"


def key(match: re.Match) -> str:
    """A repo's key in `LocalHub.repos`: its id for a model, `spaces/<id>` for a Space."""
    return f"spaces/{match['repo']}" if match["kind"] == "spaces" else match["repo"]


class LocalHub:
    """Start with `with LocalHub() as hub:`; `hub.endpoint` is what HF_ENDPOINT must name (in a process that imports
    huggingface_hub after setting it)."""

    def __init__(self):
        self.repos: dict[str, tuple[str, dict[str, bytes]]] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> LocalHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _reply(self, status: int, body: bytes | dict | list = b"", headers: dict | None = None,
                       head: bool = False) -> None:
                data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
                self.send_response(status)
                if isinstance(body, (dict, list)):
                    self.send_header("Content-Type", "application/json")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def do_POST(self) -> None:
                path = urlparse(self.path).path
                hub.requests.append(("POST", path))
                if path == "/api/repos/create":
                    request = json.loads(self._body())
                    repo_id = f"{request['organization']}/{request['name']}" if request.get("organization") else \
                        request["name"]
                    if request.get("type") == "space":  # Spaces (an `evaluate` metric's home) apart from models
                        repo_id = f"spaces/{repo_id}"
                    with hub.lock:
                        exists = repo_id in hub.repos
                        hub.repos.setdefault(repo_id, ("0" * 40, {}))
                    return self._reply(409 if exists else 200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})
                if path == "/api/validate-yaml":
                    self._body()
                    return self._reply(200, {"errors": [], "warnings": []})
                match = re.fullmatch(rf"/api/{KIND}/{REPO}/(?P<op>preupload|commit)/(?P<rev>[^/]+)", path)
                if match is None or key(match) not in hub.repos:
                    return self._reply(404, {"error": f"no route or repo for {path}"})
                if match["op"] == "preupload":
                    files = json.loads(self._body())["files"]
                    return self._reply(200, {"files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files
                    ]})
                lines = [json.loads(line) for line in self._body().decode().splitlines() if line.strip()]
                with hub.lock:
                    _, files = hub.repos[key(match)]
                    files = dict(files)
                    for line in lines:
                        if line["key"] == "file":
                            files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
                        elif line["key"] != "header":
                            return self._reply(400, {"error": f"this hub takes regular files only, got {line['key']}"})
                    sha = hashlib.sha1(json.dumps(sorted((p, hashlib.sha1(b).hexdigest()) for p, b in files.items()))
                                       .encode()).hexdigest()
                    hub.repos[key(match)] = (sha, files)
                return self._reply(200, {"commitUrl": f"{hub.endpoint}/{match['repo']}/commit/{sha}",
                                         "commitOid": sha, "success": True, "pullRequestUrl": None})

            def do_HEAD(self) -> None:
                self.do_GET(head=True)

            def do_GET(self, head: bool = False) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append(("HEAD" if head else "GET", path))
                if path == "/api/whoami-v2":  # any token but "hf_refused" is someone's
                    if self.headers.get("Authorization", "") in ("", "Bearer hf_refused"):
                        return self._reply(401, {"error": "Invalid credentials in Authorization header"}, head=head)
                    return self._reply(200, {"type": "user", "name": "someone"}, head=head)
                match = re.fullmatch(rf"/(?P<kind>spaces/)?{REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)", path)
                if match:
                    return self._resolve(f"{match['kind'] or ''}{match['repo']}", match["file"], head)
                match = re.fullmatch(rf"/api/{KIND}/{REPO}(?:/revision/(?P<rev>[^/]+))?", path)
                if match and key(match) in hub.repos:
                    sha, files = hub.repos[key(match)]
                    return self._reply(200, {"id": match["repo"], "modelId": match["repo"], "sha": sha,
                                             "private": False, "siblings": [{"rfilename": p} for p in sorted(files)]})
                match = re.fullmatch(rf"/api/{KIND}/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<folder>.*))?", path)
                if match and key(match) in hub.repos:
                    _, files = hub.repos[key(match)]
                    return self._reply(200, [
                        {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                        for p, b in sorted(files.items())
                    ])
                self._reply(404, {"error": f"Repository or route not found: {path}"},
                            {"X-Error-Code": "RepoNotFound"}, head)

            def _resolve(self, repo_id: str, file: str, head: bool) -> None:
                if repo_id not in hub.repos:
                    return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}, head)
                sha, files = hub.repos[repo_id]
                if file not in files:
                    return self._reply(404, {"error": "Entry not found"},
                                       {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha}, head)
                data = files[file]
                self._reply(200, data, {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                                        "Content-Type": "application/octet-stream"}, head)

        return Handler
