"""A fake Google Vertex AI on loopback, checking what the real one checks.

One HTTP server plays two parts:

- Google's OAuth token endpoint (`POST /token`, the service account key's `token_uri`): it
  issues an access token only for a JWT bearer grant whose assertion is signed by the service
  account's private key (verified with PyJWT against the public key), addressed to this
  endpoint (`aud`), issued by the account (`iss`), for the cloud-platform scope, and current
  (`iat`, `exp`). Tokens live `lifetime` seconds.
- Vertex AI itself: `projects/{p}/locations/{r}/publishers/{anthropic|google}/models/{m}:{method}`
  answers Claude's rawPredict / streamRawPredict with Anthropic's Messages shapes and Gemini's
  generateContent / streamGenerateContent with Gemini's; any call without a token it issued and
  still honours is refused with 401 UNAUTHENTICATED. A base path beginning `/exhausted` answers
  429 RESOURCE_EXHAUSTED, without Retry-After, as Vertex does.

The test makes the key pair itself (cryptography) and writes the service account file with
`token_uri` pointing here.
"""

import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
SA_EMAIL = "router@switchyard-e2e.iam.gserviceaccount.com"
PATH = re.compile(
    r"^(?P<prefix>/[^/]*)?/v1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)"
    r"/publishers/(?P<publisher>anthropic|google)/models/(?P<model>[^/:]+):(?P<method>\w+)$"
)


class FakeVertex:
    def __init__(self, lifetime=3600):
        self.lifetime = lifetime
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        self.public_key = key.public_key()
        self.lock = threading.Lock()
        self.issued = {}  # token -> expiry (monotonic seconds)
        self.grants = []  # monotonic time of each token issued
        self.assertions = []
        self.refused_tokens = 0  # Vertex calls refused for their token
        self.calls = []  # (path, headers, body) of the Vertex calls honoured
        self.exhausted = 0  # 429s answered
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.token_uri = f"{self.url}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()

    def key_file(self, directory):
        """The service account's key file, its token_uri this fake's."""
        path = directory / "vertex-sa.json"
        path.write_text(json.dumps({
            "type": "service_account",
            "project_id": "switchyard-e2e",
            "private_key_id": "feedfacecafebeef0123456789abcdef00c0ffee",
            "private_key": self.private_pem,
            "client_email": SA_EMAIL,
            "client_id": "100000000000000000042",
            "token_uri": self.token_uri,
        }))
        return path

    def secrets(self):
        """What must never appear in a log: the key's body, the assertions, the tokens."""
        body = "".join(line for line in self.private_pem.splitlines() if not line.startswith("-----"))
        with self.lock:
            return [body[:48], body[100:148], *self.assertions, *self.issued]

    # -- token endpoint ---------------------------------------------------------------------

    def grant(self, form):
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return 400, {"error": "unsupported_grant_type"}
        assertion = form.get("assertion", "")
        with self.lock:
            self.assertions.append(assertion)
        try:
            claims = jwt.decode(
                assertion,
                self.public_key,
                algorithms=["RS256"],
                audience=self.token_uri,
                issuer=SA_EMAIL,
                # The Rust library writes `"sub": null` when no user is impersonated, which
                # Google's endpoint takes; PyJWT would want a string.
                options={"require": ["exp", "iat", "iss", "aud"], "verify_sub": False},
            )
        except jwt.PyJWTError as error:
            return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT: {type(error).__name__}"}
        if claims.get("scope") != SCOPE or claims["exp"] - claims["iat"] > 3600 or claims["iat"] > time.time() + 5:
            return 400, {"error": "invalid_scope" if claims.get("scope") != SCOPE else "invalid_grant"}
        token = f"ya29.e2e-{len(self.grants) + 1}-{time.monotonic_ns()}"
        with self.lock:
            self.issued[token] = time.monotonic() + self.lifetime
            self.grants.append(time.monotonic())
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def honours(self, authorization):
        token = (authorization or "").removeprefix("Bearer ")
        with self.lock:
            expiry = self.issued.get(token)
        return expiry is not None and time.monotonic() < expiry

    # -- Vertex -----------------------------------------------------------------------------

    def vertex(self, handler, path, body):
        match = PATH.match(path.split("?")[0])
        if not match:
            return handler.reply(404, {"error": {"code": 404, "message": "no such method", "status": "NOT_FOUND"}})
        if not self.honours(handler.headers.get("authorization")):
            with self.lock:
                self.refused_tokens += 1
            message = "Request had invalid authentication credentials."
            return handler.reply(401, {"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}})
        if match["prefix"] == "/exhausted":
            with self.lock:
                self.exhausted += 1
            message = "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model."
            return handler.reply(429, {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}})
        with self.lock:
            self.calls.append((path, dict(handler.headers), body))
        model, method = match["model"], match["method"]
        if match["publisher"] == "anthropic":
            if body.get("anthropic_version") != "vertex-2023-10-16" or "model" in body:
                return handler.reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "not a Vertex body"}})
            if method == "rawPredict":
                return handler.reply(200, claude_message(model))
            if method == "streamRawPredict" and body.get("stream") is True:
                return handler.sse(claude_events(model))
        else:
            if method == "generateContent":
                return handler.reply(200, gemini_answer(model, True))
            if method == "streamGenerateContent" and "alt=sse" in path:
                return handler.sse(gemini_events(model))
        return handler.reply(400, {"error": {"code": 400, "message": f"bad method {method}", "status": "INVALID_ARGUMENT"}})

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path == "/token":
                    form = dict(urllib.parse.parse_qsl(raw.decode()))
                    status, body = fake.grant(form)
                    return self.reply(status, body)
                fake.vertex(self, self.path, json.loads(raw or b"{}"))

            def reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def sse(self, events):
                data = "".join(events).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def claude_message(model):
    return {
        "id": "msg_vrtx_e2e", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": f"vertex answer from {model}"}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def claude_events(model):
    def event(name, data):
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    start = claude_message(model) | {"content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    pieces = ["vertex ", "answer ", f"from {model}"]
    return [
        event("message_start", {"type": "message_start", "message": start}),
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        *(event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}) for p in pieces),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}}),
        event("message_stop", {"type": "message_stop"}),
    ]


def gemini_answer(model, last, text=None):
    candidate = {"content": {"role": "model", "parts": [{"text": text or f"gemini on vertex: {model}"}]}}
    answer = {"candidates": [candidate], "modelVersion": model}
    if last:
        candidate["finishReason"] = "STOP"
        answer["usageMetadata"] = {"promptTokenCount": 7, "candidatesTokenCount": 4, "totalTokenCount": 11}
    return answer


def gemini_events(model):
    return [
        f"data: {json.dumps(gemini_answer(model, False, 'gemini on '))}\r\n\r\n",
        f"data: {json.dumps(gemini_answer(model, True, f'vertex: {model}'))}\r\n\r\n",
    ]
