"""A real HTTP server on 127.0.0.1 standing in for a Slack incoming webhook.

It records every POST (path and JSON body) and answers from a script: each entry is
(status, headers, body) and is used once; when the script runs out it answers 200 "ok".
For delivery trials it can also stall its answer (a slow Slack) and SIGKILL the process that
posts (`victim`) at a chosen post: before Slack takes it (the post is dropped unrecorded) or
right after Slack's 200 went out.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote


class SlackStandIn:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.script: list[tuple[int, dict, str]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.victim: int | None = None              # pid SIGKILLed by a kill plan
        self.kill_plan: dict[int, str] = {}         # post number (1-based, every request counted) -> when
        self.stall_plan: dict[int, float] = {}      # post number -> seconds to wait before answering
        self.requests = 0

    def kill_at(self, post: int, when: str) -> None:
        """SIGKILL `victim` at request number `post`: when="before" drops the post unrecorded
        (killed before Slack took it), "after_200" records it and kills once the 200 is sent."""
        assert when in ("before", "after_200")
        self.kill_plan[post] = when

    def stall_at(self, post: int, seconds: float) -> None:
        """Answer request number `post` (200, posted) only after `seconds`: a slow Slack."""
        self.stall_plan[post] = seconds

    def url(self, path: str = "/services/T000/B000/XXXX") -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def answer(self, *responses: tuple[int, dict, str]) -> None:
        """Queue answers for the next posts, e.g. (429, {"Retry-After": "1"}, "rate_limited")."""
        with self.lock:
            self.script.extend(responses)

    def texts(self) -> list[str]:
        """The plain-text fallback of every post that was answered 200, in order."""
        return [post["body"]["text"] for post in self.posts if post["status"] == 200]


@contextmanager
def slack_stand_in() -> Iterator[SlackStandIn]:
    stand_in = SlackStandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            with stand_in.lock:
                stand_in.requests += 1
                number = stand_in.requests
                kill = stand_in.kill_plan.get(number)
                if kill == "before":
                    os.kill(stand_in.victim, signal.SIGKILL)
                    self.close_connection = True
                    return
                status, headers, text = stand_in.script.pop(0) if stand_in.script else (200, {}, "ok")
                stand_in.posts.append({"path": self.path, "body": body, "status": status})
            if kill == "after_200":  # stopped first, so it cannot record the 200 before the kill
                os.kill(stand_in.victim, signal.SIGSTOP)
            time.sleep(stand_in.stall_plan.get(number, 0))
            # "{path}" in a scripted body echoes the request's path, as some servers' errors do
            payload = text.replace("{path}", self.path).replace("{path_encoded}", quote(self.path, safe="")).encode()
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
            except OSError:  # a stalled answer: the client gave up and closed
                pass
            if kill == "after_200":
                os.kill(stand_in.victim, signal.SIGKILL)

        def log_message(self, *args) -> None:
            pass

    stand_in.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=stand_in.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        stand_in.server.shutdown()
        stand_in.server.server_close()


def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/services/T000/B000/REFUSED"
