"""What is measured: the routes every gateway is configured with (one mock scenario each, or a
failing primary with a healthy fallback) and the loads run over them."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Route:
    """A named path through a gateway to the mock.

    `target` is the mock scenario (the URL path segment, see crates/switchyard-mock/README.md)
    that answers; `primary`, when set, is a failing scenario tried first, and `primary_timeout`
    the per-attempt limit the gateway is configured with for it (for a primary that hangs)."""
    name: str
    target: str
    primary: str | None = None
    primary_timeout: float | None = None
    # The API the client speaks: "chat" (Chat Completions) or "responses" (the Responses API,
    # which only Switchyard and the mock are measured on).
    api: str = "chat"
    # The mock behind TLS (a throwaway authority the gateway is configured to trust), as every
    # real provider is; only the mock, nginx-proxy and Switchyard are measured so.
    tls: bool = False

    @property
    def is_fallback(self):
        return self.primary is not None


ROUTES = {r.name: r for r in [
    Route("ok", "ok"),
    Route("stream", "ok~chunks=20~gap=5ms"),
    Route("stream50", "ok~chunks=5~gap=50ms"),
    Route("fail500", "ok", primary="status=500"),
    Route("hang", "ok", primary="hang", primary_timeout=1.0),
    Route("ratelimit", "ok", primary="ratelimit=30"),
    Route("responses", "ok", api="responses"),
    Route("ok-tls", "ok", tls=True),
    Route("stream-tls", "ok~chunks=20~gap=5ms", tls=True),
    # Soak only: a stream that the upstream cuts after three chunks, with nowhere to fall back.
    Route("cut", "cut=3"),
]}


@dataclass(frozen=True)
class Scenario:
    """One row of the table: a load over one route."""
    name: str
    title: str
    route: str
    connections: int = 32
    # Requests a second, open loop (a new request on schedule whether or not earlier ones
    # have been answered); None is closed loop (each connection sends as soon as answered).
    rate: float | None = None
    stream: bool = False
    body_bytes: int = 0
    # Seconds at the start left out of the figures (failures there are still reported).
    warmup: float = 0.0
    # Extra seconds on top of the run's --duration (for the warm-up).
    extra: float = 0.0
    in_quick: bool = True
    expect: str = "mock answer"
    notes: str = ""


SCENARIOS = [
    Scenario("nonstream-32", "non-streaming, 32 connections", "ok"),
    # The overhead row: at a rate every gateway holds, p50 over direct is what the hop costs
    # (closed loop at saturation, p50 is connections ÷ throughput instead).
    Scenario("overhead-1000", "non-streaming, open loop 1000 req/s, 32 connections", "ok", rate=1000),
    Scenario("nonstream-256", "non-streaming, 256 connections (peak RSS)", "ok", connections=256,
             in_quick=False),
    Scenario("stream-32", "streaming 20 chunks 5 ms apart, 32 connections", "stream", stream=True),
    Scenario("overhead-1000-tls", "non-streaming, upstream behind TLS, open loop 1000 req/s, 32 connections",
             "ok-tls", rate=1000),
    Scenario("stream-32-tls", "streaming 20 chunks 5 ms apart, upstream behind TLS, 32 connections",
             "stream-tls", stream=True),
    Scenario("stream-gap50", "streaming 5 chunks 50 ms apart, 8 connections (chunks forwarded as they arrive?)",
             "stream50", connections=8, stream=True),
    Scenario("fallback-500", "primary answers 500, fallback healthy", "fail500"),
    Scenario("hang", "primary hangs (1 s attempt timeout), fallback healthy; after a 2 s warm-up", "hang",
             warmup=2.0, extra=2.0),
    Scenario("ratelimit-429", "primary answers 429 Retry-After: 30, fallback healthy", "ratelimit",
             in_quick=False),
    Scenario("responses-32", "Responses API (POST /v1/responses), non-streaming, 32 connections", "responses"),
    # Last: the allocator keeps some of the memory 1 MB bodies used, which would otherwise weigh
    # on every row after this one (the chaos rows are compared with the healthy row above).
    Scenario("body-1mb", "1 MB request body, 32 connections", "ok", body_bytes=1_000_000, in_quick=False),
]

SWEEP_RATES = [100, 250, 500, 1000, 2000, 4000, 6000, 8000, 12000, 16000, 20000, 24000]
SWEEP_RATES_QUICK = [250, 1000, 4000, 8000, 16000]
# The sweep's pass mark: what a gateway "holds" at an offered rate.
SWEEP_P99_MS = 50.0
# Most requests in flight during the sweep (open loop: more means the driver never holds
# back the schedule before the gateway does).
SWEEP_CONNECTIONS = 256


@dataclass
class Soak:
    """The leak check: mixed streaming and failing traffic against Switchyard alone."""
    loads: list = field(default_factory=lambda: [
        # (route, connections, stream, failures expected)
        ("stream", 16, True, False),
        ("fail500", 8, False, False),
        ("hang", 4, False, False),
        ("cut", 4, True, True),
    ])


def responses_body(chat):
    """The same request in the Responses API: its text as `input`."""
    return {"model": chat["model"], "input": chat["messages"][-1]["content"],
            "max_output_tokens": chat["max_tokens"]}


def body(model, body_bytes=0):
    """The chat request every gateway gets, padded to about `body_bytes` when asked."""
    content = "Hello!"
    if body_bytes:
        content = ("lorem ipsum " * (body_bytes // 12 + 1))[:body_bytes]
    return {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
