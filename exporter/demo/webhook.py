"""Alertmanager's webhook receiver: the demo's stand-in for the on-call's pager."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from exporter.demo.console import say


class WebhookHandler(BaseHTTPRequestHandler):
    """Print each notification as the on-call would get it."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()
        try:
            payload = json.loads(body)
        except ValueError:
            return
        receiver = payload.get("receiver", "?")
        for alert in payload.get("alerts", []):
            labels = alert.get("labels", {})
            summary = alert.get("annotations", {}).get("summary", "")
            state = "RESOLVED" if alert.get("status") == "resolved" else "FIRING"
            say(
                f"  NOTIFY  {receiver}: {state} {labels.get('alertname')} "
                f"({labels.get('severity', '?')}): {summary}"
            )

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request access log; the notification line says it all."""


def start_webhook(port: int) -> ThreadingHTTPServer | None:
    """Serve on ``port`` (0: one the kernel picks; ``server_port`` says which) on a daemon
    thread, so notifications print while the main loop narrates; None where it is taken."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), WebhookHandler)
    except OSError:
        return None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_webhook(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
