"""Outbound notifications in tests (N1-N3): subscriptions and outbox rows written with plain SQL,
as the store's units write them (the secret encrypted with weave.secretbox), and a receiver on
loopback that records what it is sent and answers as told."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from dataclasses import dataclass, field

from weave.rules import notify
from weave.secretbox import Keyring, new_key

SECRET_KEY = new_key()  # WEAVE_SECRET_KEY of the scanner processes that deliver
KEYRING = Keyring([SECRET_KEY])


@dataclass
class Subscription:
    id: int
    secret: str


def subscribe(database, url: str, name: str = "hooks", status: str = "ENABLED", namespace_id: int = 1) -> Subscription:
    secret = notify.new_secret()

    def insert(tx):
        now = tx.now()
        return tx.insert(
            "INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at,"
            " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (namespace_id, name, url, 2**6 - 1, status, KEYRING.encrypt(secret), now, now),
        )

    return Subscription(database.run(insert), secret)


def enqueue(database, subscription: Subscription, event: str = "workflow.succeeded", data: dict | None = None) -> int:
    """A PENDING notification, due now, as the change's transaction writes it."""

    def insert(tx):
        now = tx.now()
        webhook_id = f"msg_{uuid.uuid4().hex}"
        body = json.dumps({"type": event, "timestamp": now.isoformat() + "Z", "data": data or {}})
        return tx.insert(
            "INSERT INTO notifications (subscription_id, namespace_id, event_type, webhook_id, occurred_at, body,"
            " status, due_at) SELECT id, namespace_id, %s, %s, %s, %s, 'PENDING', %s FROM notify_subscriptions"
            " WHERE id = %s",
            (event, webhook_id, now, body, now, subscription.id),
        )

    return database.run(insert)


def notification(database, notification_id: int) -> dict:
    return database.run(lambda tx: tx.one("SELECT * FROM notifications WHERE id = %s", (notification_id,)))


def attempts(database, notification_id: int) -> list[dict]:
    return database.run(
        lambda tx: tx.all(
            "SELECT * FROM notification_attempts WHERE notification_id = %s ORDER BY id", (notification_id,)
        )
    )


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic()


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST and answers the next of `answers`
    (a status, or "hang": hold the request until `release` is set), then `otherwise`."""

    answers: list = field(default_factory=list)
    otherwise: int | str = 204
    location: str | None = None  # the Location of a 3xx answer
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.received.append(Received(headers, body, time.monotonic()))
                receiver.arrived.set()
                answer = receiver.answers.pop(0) if receiver.answers else receiver.otherwise
                if answer == "hang":
                    receiver.release.wait(60)
                    answer = 204
                self.send_response(answer)
                if receiver.location:
                    self.send_header("location", receiver.location)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks?from=weave"
