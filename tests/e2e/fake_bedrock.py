"""A fake AWS Bedrock runtime on loopback that checks what the real one checks.

Every request's SigV4 signature is verified with botocore's signer, an implementation
independent of the gateway's (aws-sigv4): the canonical request is rebuilt from what arrived
(the path as sent, the signed headers, the body), signed with the secret the fake knows for the
access key, and compared; a wrong or missing signature is refused with 403
`InvalidSignatureException`, as AWS does. A Bedrock API key is accepted as a bearer token.

Event streams are framed as AWS frames them (`application/vnd.amazon.eventstream`): prelude
(total and headers length, prelude CRC32), string headers, payload, message CRC32, the CRCs from
zlib; each frame is checked by decoding it back with botocore's own event-stream parser.
"""

import base64
import json
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

REGION = "us-east-1"


def frame(headers, payload):
    """One event-stream message with string headers, both CRCs computed as AWS does."""
    encoded = b""
    for name, value in headers.items():
        name_bytes, value_bytes = name.encode(), value.encode()
        encoded += struct.pack("!B", len(name_bytes)) + name_bytes + b"\x07" + struct.pack("!H", len(value_bytes)) + value_bytes
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    message += struct.pack("!I", zlib.crc32(message) & 0xFFFFFFFF)
    # botocore's parser checks both CRCs and the lengths: what it reads back, AWS would have sent.
    parser = EventStreamBuffer()
    parser.add_data(message)
    decoded = next(iter(parser))
    assert decoded.payload == payload and decoded.headers[":message-type"] == headers[":message-type"]
    return message


def event(kind, payload):
    return frame({":message-type": "event", ":event-type": kind, ":content-type": "application/json"}, json.dumps(payload).encode())


def exception(kind, message):
    return frame({":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"}, json.dumps({"message": message}).encode())


def claude_chunks(events):
    """InvokeModel stream frames: each Anthropic event as `{"bytes": base64}`."""
    return b"".join(event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode(), "p": "abcd"}) for e in events)


def claude_stream_events(text, model="claude-sonnet-4-5-20250929"):
    words = text.split(" ")
    events = [
        {"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 11, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    for i, word in enumerate(words):
        events.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word if i == 0 else " " + word}})
    events += [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": len(words)}},
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 11, "outputTokenCount": len(words)}},
    ]
    return events


def claude_message(text, model="claude-sonnet-4-5-20250929"):
    return {
        "id": "msg_bdrk_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": len(text.split())},
    }


def converse_answer(text):
    return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "end_turn",
            "usage": {"inputTokens": 7, "outputTokens": len(text.split()), "totalTokens": 7 + len(text.split())}, "metrics": {"latencyMs": 12}}


def converse_stream(text):
    out = event("messageStart", {"role": "assistant", "p": "abc"})
    for i, word in enumerate(text.split(" ")):
        out += event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": word if i == 0 else " " + word}})
    out += event("contentBlockStop", {"contentBlockIndex": 0})
    out += event("messageStop", {"stopReason": "end_turn"})
    out += event("metadata", {"usage": {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}, "metrics": {"latencyMs": 9}})
    return out


class Reply:
    """What the fake answers: a status, a JSON body or event-stream bytes, headers."""

    def __init__(self, status=200, body=None, stream=None, headers=None):
        self.status, self.body, self.stream, self.headers = status, body, stream, headers or {}

    @staticmethod
    def error(status, kind, message):
        return Reply(status, {"message": message}, headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"})


class FakeBedrock:
    """The fake: `behave(model, action, body, request) -> Reply` decides each answer once the
    request is authenticated. `keys` maps access key ids to their secrets; `api_keys` lists the
    Bedrock API keys accepted as bearer tokens."""

    def __init__(self, behave, keys, api_keys=()):
        self.behave, self.keys, self.api_keys = behave, keys, set(api_keys)
        self.requests = []
        self.verified = 0
        self.refused = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                fake.handle(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()

    def handle(self, handler, body):
        record = {"path": handler.path, "headers": {k.lower(): v for k, v in handler.headers.items()}, "body": body}
        self.requests.append(record)
        refusal = self.authenticate(handler, body)
        if refusal is not None:
            self.refused += 1
            return self.send(handler, refusal)
        parts = handler.path.split("/")
        if len(parts) != 4 or parts[1] != "model":
            return self.send(handler, Reply.error(404, "UnknownOperationException", "no such operation"))
        model, action = unquote(parts[2]), parts[3]
        record["model"], record["action"] = model, action
        parsed = json.loads(body) if body else None
        record["json"] = parsed
        self.send(handler, self.behave(model, action, parsed, record))

    def authenticate(self, handler, body):
        authorization = handler.headers.get("authorization", "")
        if authorization.startswith("Bearer "):
            return None if authorization[7:] in self.api_keys else Reply.error(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return Reply.error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        fields = dict(part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 "):].split(","))
        access_key, date, region, service, _ = fields["Credential"].split("/")
        secret = self.keys.get(access_key)
        if secret is None:
            return Reply.error(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
        if (region, service) != (REGION, "bedrock"):
            return Reply.error(403, "InvalidSignatureException", f"Credential should be scoped to a valid region and service: {region}/{service}")
        signed = fields["SignedHeaders"].split(";")
        headers = {name: handler.headers.get(name, "") for name in signed}
        request = AWSRequest(method="POST", url=f"http://{handler.headers['host']}{handler.path}", data=body, headers=headers)
        request.context["timestamp"] = handler.headers.get("x-amz-date", "")
        token = handler.headers.get("x-amz-security-token")
        auth = SigV4Auth(Credentials(access_key, secret, token), "bedrock", REGION)
        canonical = auth.canonical_request(request)
        expected = auth.signature(auth.string_to_sign(request, canonical), request)
        if expected != fields["Signature"] or date != request.context["timestamp"][:8]:
            return Reply.error(
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
            )
        self.verified += 1
        return None

    def send(self, handler, reply):
        if reply.stream is not None:
            payload, content_type = reply.stream, "application/vnd.amazon.eventstream"
        else:
            payload, content_type = json.dumps(reply.body).encode(), "application/json"
        handler.send_response(reply.status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(payload)))
        handler.send_header("x-amzn-RequestId", "fake-request-id")
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)


class FakeSsoPortal:
    """IAM Identity Center's portal on loopback: `GetRoleCredentials` (`GET
    /federation/credentials?account_id=…&role_name=…` with the `x-amz-sso_bearer_token` header,
    as the portal API reference gives it) answers the role's temporary credentials for the one
    access token it knows, and 401 `UnauthorizedException` for any other."""

    def __init__(self, access_token, account_id, role_name, credentials):
        self.calls = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                from urllib.parse import parse_qs, urlsplit

                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                token = self.headers.get("x-amz-sso_bearer_token")
                portal.calls.append({"path": url.path, "query": query, "token_matches": token == access_token})
                wanted = {"account_id": account_id, "role_name": role_name}
                if url.path != "/federation/credentials" or query != wanted or token != access_token:
                    self._send(401, {"message": "Session token not found or invalid"}, "UnauthorizedException")
                    return
                access_key, secret, session_token, expiration_ms = credentials
                self._send(200, {"roleCredentials": {"accessKeyId": access_key, "secretAccessKey": secret,
                                                     "sessionToken": session_token, "expiration": expiration_ms}})

            def _send(self, status, body, error_type=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                if error_type:
                    self.send_header("x-amzn-errortype", error_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
