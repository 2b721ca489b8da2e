"""A webhook receiver on loopback for the push tests: Python's http.server in
a thread (HTTP/1.1, keep-alive), optionally over TLS, that records every POST
and answers what the test scripts for its path. It verifies Standard Webhooks
signatures with hmac, as a user's receiver would. The `recv` fixture makes them."""

import base64
import hashlib
import hmac
import http.server
import ssl
import sys
import threading
import time

import pytest


def secret_key(secret):
    """The HMAC key of a --push-secret: whsec_BASE64 decoded, else the bytes."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[6:])
    return secret.encode()


def verify(secrets, headers, body):
    """True if one v1 signature of webhook-signature matches one secret."""
    msg_id = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    signed = b"%s.%s.%s" % (msg_id.encode(), ts.encode(), body)
    for key in (secret_key(s) for s in secrets):
        want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        for sig in headers.get("webhook-signature", "").split():
            version, _, value = sig.partition(",")
            if version == "v1" and hmac.compare_digest(value, want):
                return True
    return False


class Req:
    def __init__(self, path, headers, body, peer):
        self.path = path
        self.headers = headers
        self.body = body
        self.peer = peer
        self.at = time.time()

    @property
    def job(self):
        return self.headers.get("webhook-id")


class Receiver:
    """script(path, req) -> (status, headers) or None (200). Set .hang to an
    Event to hold every answer until it is set."""

    def __init__(self, certfile=None, keyfile=None, secrets=None):
        self.requests = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.script = lambda path, req: None
        self.secrets = secrets
        self.hang = None
        self.active = 0
        self.max_active = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n)
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                req = Req(self.path, hdrs, body, self.client_address)
                with outer.cond:
                    outer.requests.append(req)
                    outer.active += 1
                    outer.max_active = max(outer.max_active, outer.active)
                    outer.cond.notify_all()
                try:
                    hang = outer.hang
                    if hang is not None:
                        hang.wait()
                    answer = outer.script(self.path, req)
                    if outer.secrets and not verify(outer.secrets, hdrs, body):
                        answer = (401, {})
                    status, extra = answer or (200, {})
                    self.send_response(status)
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                finally:
                    with outer.cond:
                        outer.active -= 1

            def log_message(self, *a):
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 512  # hundreds of connections at once

            def handle_error(self, request, client_address):
                # delayqd gave up on the delivery (--push-timeout) before the answer went out:
                # expected in the tests of timeouts, not worth a traceback in the log
                if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    return
                super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if certfile:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path="/hook", scheme="http", host="127.0.0.1"):
        return "%s://%s:%d%s" % (scheme, host, self.port, path)

    def of(self, job):
        """Requests for 'topic/id', in order."""
        with self.lock:
            return [r for r in self.requests if r.job == job]

    def wait(self, pred, timeout=10.0):
        """Waits until pred(requests) is true; returns the requests then."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("receiver: condition not met in %.0f s; got %d requests"
                                         % (timeout, len(self.requests)))
                self.cond.wait(left)
            return list(self.requests)

    def close(self):
        if self.hang is not None:
            self.hang.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recv():
    """recv(**Receiver kwargs) -> a Receiver, closed at teardown."""
    made = []

    def factory(**kw):
        r = Receiver(**kw)
        made.append(r)
        return r

    yield factory
    for r in made:
        r.close()
