"""A stand-in for the Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub's
snapshot_download calls, in the Hub's URL layout, for repositories held in memory.

    GET  /api/models/{org}/{name}[/revision/{rev}]   model info: sha (the commit), siblings
    GET  /api/models/{org}/{name}/tree/{rev}[/{dir}]  file list: path, size, oid, lfs
    HEAD /{org}/{name}/resolve/{rev}/{path}           X-Repo-Commit, ETag, Content-Length, ...
    GET  /{org}/{name}/resolve/{rev}/{path}           the bytes (Range honoured: resumes)

`mode` makes it misbehave: "not_found" (404 RepoNotFound for everything), "gated" (model info
answers, files need `Authorization: Bearer <token>`, else 401 GatedRepo), "cut" (a GET of
`cut_file` sends Content-Length N, N/2 bytes, then closes; a resumed GET closes before any
byte). Every request is logged in `requests` as (method, path, Range header).
"""
from __future__ import annotations

import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pth")


@dataclass
class Repo:
    files: Dict[str, bytes]
    revisions: Dict[str, str]  # branch or tag -> commit (40 hex digits)

    def commit(self, rev: str) -> Optional[str]:
        if rev in self.revisions:
            return self.revisions[rev]
        return rev if rev in self.revisions.values() else None


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class _Meta:
    oid: str
    sha256: Optional[str]  # LFS files only

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid


@dataclass
class StandInHub:
    repos: Dict[str, Repo]
    mode: str = "ok"
    token: str = "hf_stand_in_token"
    cut_file: str = ""
    requests: List[Tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self):
        self._meta: Dict[Tuple[str, str], _Meta] = {}
        for repo_id, repo in self.repos.items():
            for path, data in repo.files.items():
                lfs = hashlib.sha256(data).hexdigest() if path.endswith(LFS_SUFFIXES) else None
                self._meta[(repo_id, path)] = _Meta(_git_oid(data), lfs)
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "StandInHub":
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def log(self, method: str, path: str, range_header: str) -> None:
        with self._lock:
            self.requests.append((method, path, range_header))

    def fetched(self) -> List[str]:
        """The file paths that were GET through resolve/ (in order, repeats kept)."""
        return [p.split("/resolve/", 1)[1].split("/", 1)[1] for m, p, _ in self.requests if m == "GET" and "/resolve/" in p]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: StandInHub

    def log_message(self, format, *args):  # quiet
        pass

    # -- replies ------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, headers=None) -> None:
        self._send(200, json.dumps(obj).encode(), headers)

    def _error(self, status: int, code: str, message: str, headers=None) -> None:
        h = {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})}
        self._send(status, json.dumps({"error": message}).encode(), h)

    # -- routing ------------------------------------------------------------------------------
    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def _route(self) -> None:
        hub = self.hub
        path = unquote(urlsplit(self.path).path)
        hub.log(self.command, path, self.headers.get("Range", ""))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if self._repo_missing(repo_id):
                return
            repo = hub.repos[repo_id]
            if not rest:
                return self._model_info(repo_id, repo, "main")
            if rest[0] == "revision" and len(rest) >= 2:
                return self._model_info(repo_id, repo, "/".join(rest[1:]))
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(repo_id, repo, rest[1], "/".join(rest[2:]))
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo_id = "/".join(parts[:2])
            if self._repo_missing(repo_id):
                return
            return self._resolve(repo_id, hub.repos[repo_id], parts[3], "/".join(parts[4:]))
        self._error(404, "EntryNotFound", f"no route for {path}")

    def _repo_missing(self, repo_id: str) -> bool:
        if self.hub.mode == "not_found" or repo_id not in self.hub.repos:
            self._error(404, "RepoNotFound", "Repository not found")
            return True
        return False

    def _commit_or_404(self, repo: Repo, rev: str) -> Optional[str]:
        commit = repo.commit(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return commit

    def _model_info(self, repo_id: str, repo: Repo, rev: str) -> None:
        commit = self._commit_or_404(repo, rev)
        if commit is None:
            return
        self._json({"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
                    "sha": commit, "private": False, "disabled": False,
                    "gated": "manual" if self.hub.mode == "gated" else False,
                    "tags": [], "downloads": 0, "likes": 0,
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)]})

    def _tree(self, repo_id: str, repo: Repo, rev: str, under: str) -> None:
        if self._commit_or_404(repo, rev) is None:
            return
        entries, dirs = [], set()
        for p in sorted(repo.files):
            if under and not p.startswith(under.rstrip("/") + "/"):
                continue
            for i in range(1, p.count("/") + 1):
                dirs.add("/".join(p.split("/")[:i]))
            meta = self.hub._meta[(repo_id, p)]
            entry = {"type": "file", "oid": meta.oid, "size": len(repo.files[p]), "path": p}
            if meta.sha256:
                entry["lfs"] = {"oid": meta.sha256, "size": len(repo.files[p]), "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "oid": _git_oid(d.encode()), "size": 0, "path": d} for d in sorted(dirs)]
        self._json(entries)

    def _resolve(self, repo_id: str, repo: Repo, rev: str, path: str) -> None:
        hub = self.hub
        commit = repo.commit(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        if hub.mode == "gated" and self.headers.get("Authorization", "") != f"Bearer {hub.token}":
            return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it "
                                                 "and be authenticated to access it. Please log in.",
                               {"X-Repo-Commit": commit})
        if path not in repo.files:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"", {"X-Repo-Commit": commit})
        data = repo.files[path]
        meta = hub._meta[(repo_id, path)]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{meta.etag}"', "Accept-Ranges": "bytes"}
        if meta.sha256:
            headers.update({"X-Linked-Etag": f'"{meta.sha256}"', "X-Linked-Size": str(len(data))})
        start = 0
        range_header = self.headers.get("Range", "")
        if range_header.startswith("bytes=") and range_header.endswith("-"):
            start = int(range_header[len("bytes="):-1])
        if self.command == "GET" and hub.mode == "cut" and path == hub.cut_file:
            return self._cut(data, start, headers)
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return self._send(206, data[start:], headers, "application/octet-stream")
        self._send(200, data, headers, "application/octet-stream")

    def _cut(self, data: bytes, start: int, headers: Dict[str, str]) -> None:
        """Content-Length says the whole (rest of the) file; half of it (nothing, on a resume) comes."""
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not start:
            self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
