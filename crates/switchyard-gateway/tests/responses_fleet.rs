//! The Responses API's kept conversations, and Claude's kept thinking, across a fleet, in
//! process on loopback: a real Redis, two gateways sharing it, one upstream that records what
//! it was sent.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::{CLAUDE_TOOL_TURN, CLAUDE_TOOL_TURN_SSE, in_process_url};
use switchyard_state::testing::RedisServer;

const KEY: &str = "sk-responses-fleet-0123456789";
const OTHER: &str = "sk-responses-other-0123456789";

async fn upstream() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let router = axum::Router::new().fallback(move |axum::Json(body): axum::Json<Value>| {
        let keep = keep.clone();
        async move {
            let turn = keep.lock().unwrap().len();
            keep.lock().unwrap().push(body);
            axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("answer {turn}")}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}))
        }
    });
    let addr = support::serve_router(router).await;
    (addr, seen)
}

async fn replica(upstream: SocketAddr, redis: &str) -> String {
    let yaml = format!(
        "providers:\n  up: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: sk-up-0123456789 }}\nroutes:\n  default: {{ targets: [up:m] }}\ngateway: {{ keys: [{KEY}, {OTHER}] }}\nstate: {{ redis: '{redis}', prefix: responses-fleet }}\n"
    );
    in_process_url(&yaml).await
}

async fn call(method: reqwest::Method, url: String, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, url).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_conversation_one_replica_kept_goes_on_through_another() {
    let redis = RedisServer::start();
    let (upstream, seen) = upstream().await;
    let (a, b) = (replica(upstream, &redis.url()).await, replica(upstream, &redis.url()).await);
    let post = reqwest::Method::POST;
    let first = json!({"model": "default", "input": "My name is Ada.", "instructions": "Be brief."});
    let (status, response) = call(post.clone(), format!("{a}/v1/responses"), KEY, Some(first)).await;
    assert_eq!(status, 200, "{response}");
    let id = response["id"].as_str().unwrap().to_owned();

    let next = json!({"model": "default", "input": "My name?", "previous_response_id": id});
    let (status, second) = call(post.clone(), format!("{b}/v1/responses"), KEY, Some(next.clone())).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["output"][0]["content"][0]["text"], "answer 1");
    let sent = seen.lock().unwrap()[1]["messages"].clone();
    assert_eq!(
        sent,
        json!([{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "answer 0"},
            {"role": "user", "content": "My name?"}])
    );

    // Read through the other replica; another key sees nothing, not even to continue it.
    let (status, read) = call(reqwest::Method::GET, format!("{b}/v1/responses/{id}"), KEY, None).await;
    assert_eq!((status, &read["id"]), (200, &Value::from(id.clone())));
    let (status, _) = call(reqwest::Method::GET, format!("{b}/v1/responses/{id}"), OTHER, None).await;
    assert_eq!(status, 404);
    let (status, _) = call(post.clone(), format!("{a}/v1/responses"), OTHER, Some(next.clone())).await;
    assert_eq!(status, 400);
    // The key never names anything in Redis.
    let keys = redis.cli(&["KEYS", "responses-fleet:*"]);
    assert!(keys.contains(&format!("responses-fleet:response:{id}")), "{keys}");
    let kept = redis.cli(&["GET", &format!("responses-fleet:response:{id}")]);
    assert!(!kept.contains(KEY) && !keys.contains(KEY), "{kept}");

    // Deleted through one replica, it is gone from both.
    let (status, _) = call(reqwest::Method::DELETE, format!("{b}/v1/responses/{id}"), KEY, None).await;
    assert_eq!(status, 200);
    let (status, _) = call(reqwest::Method::GET, format!("{a}/v1/responses/{id}"), KEY, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn an_item_one_replica_served_is_read_back_by_reference_through_another() {
    // As the Vercel AI SDK's OpenAI provider sends a conversation (store on): the earlier
    // answer's items named by id.
    let redis = RedisServer::start();
    let (upstream, seen) = upstream().await;
    let (a, b) = (replica(upstream, &redis.url()).await, replica(upstream, &redis.url()).await);
    let post = reqwest::Method::POST;
    let first = json!({"model": "default", "input": "My name is Ada."});
    let (_, response) = call(post.clone(), format!("{a}/v1/responses"), KEY, Some(first)).await;
    let item = response["output"][0]["id"].as_str().unwrap().to_owned();

    let input = json!([{"role": "user", "content": "My name is Ada."}, {"type": "item_reference", "id": item},
        {"role": "user", "content": "My name?"}]);
    let next = json!({"model": "default", "input": input});
    let (status, second) = call(post.clone(), format!("{b}/v1/responses"), KEY, Some(next.clone())).await;
    assert_eq!(status, 200, "{second}");
    let sent = seen.lock().unwrap()[1]["messages"].clone();
    assert_eq!(
        sent,
        json!([{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": "answer 0"},
            {"role": "user", "content": "My name?"}])
    );
    // Kept with its items in place, so that a continuation of it reads them too.
    let id = second["id"].as_str().unwrap();
    let then = json!({"model": "default", "input": "And?", "previous_response_id": id});
    let (status, _) = call(post.clone(), format!("{a}/v1/responses"), KEY, Some(then)).await;
    assert_eq!(status, 200);
    assert_eq!(seen.lock().unwrap()[2]["messages"][1], json!({"role": "assistant", "content": "answer 0"}));

    // Another key's reference names nothing; the refusal says which item.
    let (status, refused) = call(post.clone(), format!("{b}/v1/responses"), OTHER, Some(next)).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("input[1]") && message.contains(&item), "{refused}");
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing was sent upstream for the refused request");
}

#[tokio::test]
async fn an_answer_one_replica_remembered_is_served_stale_by_another() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let redis = RedisServer::start();
    let down = Arc::new(AtomicBool::new(false));
    let flag = down.clone();
    let upstream = axum::Router::new().fallback(move || {
        let down = flag.load(Ordering::SeqCst);
        async move {
            if down {
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"error": {"message": "down"}})));
            }
            (axum::http::StatusCode::OK, axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "remembered by a"}, "finish_reason": "stop"}]})))
        }
    });
    let addr = support::serve_router(upstream).await;
    let yaml = format!(
        "providers:\n  up: {{ kind: openai_compatible, base_url: 'http://{addr}/v1' }}\nroutes:\n  default:\n    targets: [up:m]\n    retry: {{ max_attempts: 1 }}\n    health_gate: false\n    candidates: [{{ name: last-good, cache: {{ max_age: 1h }} }}]\ngateway: {{ keys: [{KEY}] }}\nstate: {{ redis: '{}', prefix: answers-fleet }}\n",
        redis.url()
    );
    let (a, b) = (in_process_url(&yaml).await, in_process_url(&yaml).await);
    let question = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
    let (status, _) =
        call(reqwest::Method::POST, format!("{a}/v1/chat/completions"), KEY, Some(question.clone())).await;
    assert_eq!(status, 200);
    // Shared a round trip after the answer, off the request's path.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !redis.cli(&["KEYS", "answers-fleet:answer:*"]).contains("last-good") {
        assert!(std::time::Instant::now() < deadline, "the answer never reached Redis");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    down.store(true, Ordering::SeqCst);
    let response = reqwest::Client::new()
        .post(format!("{b}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&question)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-switchyard-cache"], "stale");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "remembered by a");
    assert!(
        !redis.cli(&["KEYS", "answers-fleet:*"]).contains(KEY),
        "keys are hashed where they name entries"
    );
}

#[tokio::test]
async fn a_streamed_turn_is_in_the_fleet_before_the_client_reads_that_it_completed() {
    let redis = RedisServer::start();
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let replica = |redis: String| async move {
        let yaml = format!(
            "providers:\n  up: {{ kind: openai_compatible, base_url: 'http://{mock}/ok/v1', api_key: sk-up-0123456789 }}\nroutes:\n  default: {{ targets: [up:m] }}\ngateway: {{ keys: [{KEY}] }}\nstate: {{ redis: '{redis}', prefix: responses-stream }}\n"
        );
        in_process_url(&yaml).await
    };
    let (a, b) = (replica(redis.url()).await, replica(redis.url()).await);
    let client = reqwest::Client::new();

    for turn in 0..5 {
        let first = json!({"model": "default", "input": format!("Turn {turn}."), "stream": true});
        let mut stream =
            client.post(format!("{a}/v1/responses")).bearer_auth(KEY).json(&first).send().await.unwrap();
        assert_eq!(stream.status(), 200);
        // Read up to the completed event, and no further: the client acts on it at once.
        let mut text = String::new();
        while !text.contains("event: response.completed") {
            let chunk = stream.chunk().await.unwrap().expect("the stream completes");
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        let completed = text.split("event: response.completed").nth(1).unwrap();
        let data = completed.lines().find_map(|line| line.strip_prefix("data: ")).unwrap();
        let id = serde_json::from_str::<Value>(data).unwrap()["response"]["id"].as_str().unwrap().to_owned();

        let next = json!({"model": "default", "input": "And then?", "previous_response_id": id});
        let (status, body) = call(reqwest::Method::POST, format!("{b}/v1/responses"), KEY, Some(next)).await;
        assert_eq!(status, 200, "turn {turn}: the other replica must find {id}: {body}");
    }
}

#[tokio::test]
async fn a_sessions_pin_made_through_one_replica_is_honoured_by_another() {
    let redis = RedisServer::start();
    let yaml = format!(
        "providers:\n  a: {{ kind: simulated }}\n  b: {{ kind: simulated }}\nroutes:\n  default: {{ targets: [a:m, b:m], rotation: round_robin }}\ngateway: {{ keys: [{KEY}] }}\nstate: {{ redis: '{}', prefix: sessions }}\n",
        redis.url()
    );
    let (one, two) = (in_process_url(&yaml).await, in_process_url(&yaml).await);
    let client = reqwest::Client::new();
    let send = |url: &str, session: Option<&str>| {
        let mut request = client.post(format!("{url}/v1/chat/completions")).bearer_auth(KEY);
        if let Some(session) = session {
            request = request.header("x-switchyard-session", session);
        }
        request.json(&json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})).send()
    };
    let target =
        |response: reqwest::Response| response.headers()["x-switchyard-target"].to_str().unwrap().to_owned();

    assert_eq!(target(send(&two, None).await.unwrap()), "a:m", "two's next turn is b");
    assert_eq!(target(send(&one, Some("conv")).await.unwrap()), "a:m");
    let started = std::time::Instant::now();
    while !redis.cli(&["KEYS", "sessions:*affinity*"]).contains("affinity") {
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "the pin reached Redis");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(!redis.cli(&["KEYS", "*"]).contains("conv"), "no session id in Redis");
    assert_eq!(target(send(&two, Some("conv")).await.unwrap()), "a:m", "the fleet's pin, not two's turn");
}

/// Claude's answer to a tool's result.
const CLAUDE_TEXT: &str = r#"{"id":"msg_4","type":"message","role":"assistant","model":"claude-opus-4-7","content":[{"type":"text","text":"18C in Paris."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":5}}"#;

/// A Claude upstream that answers a question with a tool turn thought in (whole or streamed,
/// as asked) and a tool's result with text, and records each body it was sent.
async fn claude() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let router = axum::Router::new().fallback(move |axum::Json(body): axum::Json<Value>| {
        let keep = keep.clone();
        async move {
            let (streamed, question) =
                (body["stream"] == true, body["messages"].as_array().unwrap().len() == 1);
            keep.lock().unwrap().push(body);
            let (content_type, answer) = match (question, streamed) {
                (true, true) => ("text/event-stream", CLAUDE_TOOL_TURN_SSE),
                (true, false) => ("application/json", CLAUDE_TOOL_TURN),
                (false, _) => ("application/json", CLAUDE_TEXT),
            };
            ([(axum::http::header::CONTENT_TYPE, content_type)], answer)
        }
    });
    let addr = support::serve_router(router).await;
    (addr, seen)
}

#[tokio::test]
async fn claude_thinks_on_through_a_tool_turn_another_replica_answered() {
    // Most clients of OpenAI's API keep no `thinking_blocks`; behind a balancer, the turn they
    // send back bare reaches another replica than the one that kept its thinking.
    let redis = RedisServer::start();
    let (upstream, seen) = claude().await;
    let tools =
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let asked = json!({"role": "user", "content": "Weather?"});
    let post = reqwest::Method::POST;
    for stream in [false, true] {
        // Two replicas of their own each time, on a prefix of their own: the streamed turn is
        // found only if the streamed answer wrote it.
        let yaml = format!(
            "providers:\n  up: {{ kind: anthropic, base_url: 'http://{upstream}', api_key: sk-up-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['up:claude-opus-4-7'] }}\ngateway: {{ keys: [{KEY}, {OTHER}] }}\nstate: {{ redis: '{}', prefix: thinking-fleet-{stream} }}\n",
            redis.url()
        );
        let (a, b) = (in_process_url(&yaml).await, in_process_url(&yaml).await);
        let first = json!({"model": "default", "stream": stream, "reasoning_effort": "high",
            "messages": [asked], "tools": tools});
        let response = reqwest::Client::new()
            .post(format!("{a}/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&first)
            .send()
            .await
            .unwrap();
        let answer = response.text().await.unwrap();
        assert!(answer.contains("toolu_1"), "{answer}");
        // Kept in Redis before the client could read the answer's end: sent back at once.
        let bare = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]});
        let result = json!({"role": "tool", "tool_call_id": "toolu_1", "content": "18C"});
        let second = json!({"model": "default", "reasoning_effort": "high", "messages": [asked, bare, result], "tools": tools});
        for (key, thinks_on) in [(KEY, true), (OTHER, false)] {
            let (status, answer) =
                call(post.clone(), format!("{b}/v1/chat/completions"), key, Some(second.clone())).await;
            assert_eq!(status, 200, "{answer}");
            let sent = seen.lock().unwrap().last().unwrap().clone();
            let opening = &sent["messages"][1]["content"][0];
            let expected =
                json!({"type": "thinking", "thinking": "Need the tool.", "signature": "EqQBCgIYAhIM"});
            assert_eq!(opening == &expected, thinks_on, "stream {stream}, key {key}: {sent}");
        }
    }
    // Redis names the turns by a hash: neither the key nor the call's id.
    let keys = redis.cli(&["KEYS", "thinking-fleet-*:thinking:*"]);
    assert_eq!(keys.lines().count(), 2, "one turn a pass, kept once: {keys}");
    assert!(!keys.contains("toolu_1") && !keys.contains(KEY), "{keys}");
}

#[tokio::test]
async fn a_turn_kept_while_redis_was_away_reaches_the_fleet_once_redis_takes_writes_again() {
    let mut redis = RedisServer::start();
    let (upstream, _) = upstream().await;
    let (a, b) = (replica(upstream, &redis.url()).await, replica(upstream, &redis.url()).await);
    let post = reqwest::Method::POST;
    let turn = |text: &str| Some(json!({"model": "default", "input": text}));
    assert_eq!(call(post.clone(), format!("{a}/v1/responses"), KEY, turn("Hello.")).await.0, 200);

    redis.kill();
    let (status, kept) = call(post.clone(), format!("{a}/v1/responses"), KEY, turn("Anyone?")).await;
    assert_eq!(status, 200, "answered though Redis is away: {kept}");
    let id = kept["id"].as_str().unwrap().to_owned();
    // Another replica cannot tell whether the fleet keeps it: a 503 the SDKs ask again, not a
    // 400 saying it expired.
    let (status, away) = call(reqwest::Method::GET, format!("{b}/v1/responses/{id}"), KEY, None).await;
    assert_eq!((status, away["error"]["code"].as_str()), (503, Some("fleet_unavailable")), "{away}");
    let next = Some(json!({"model": "default", "input": "And?", "previous_response_id": id}));
    let (status, away) = call(post.clone(), format!("{b}/v1/responses"), KEY, next).await;
    assert_eq!(status, 503, "{away}");
    let (status, away) = call(reqwest::Method::DELETE, format!("{b}/v1/responses/{id}"), KEY, None).await;
    assert_eq!(status, 503, "not a 404 saying it does not exist: {away}");
    redis.restart();

    // The next write Redis takes sends the one it missed on.
    support::until(
        "the turn kept while Redis was away reaches the fleet",
        std::time::Duration::from_secs(10),
        async || {
            call(post.clone(), format!("{a}/v1/responses"), KEY, turn("Later.")).await;
            let (status, found) =
                call(reqwest::Method::GET, format!("{b}/v1/responses/{id}"), KEY, None).await;
            if status == 200 { Ok(()) } else { Err(format!("{status} {found}")) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_delete_redis_cannot_take_deletes_nothing_and_says_so() {
    let redis = RedisServer::start();
    let (upstream, _) = upstream().await;
    let (a, b) = (replica(upstream, &redis.url()).await, replica(upstream, &redis.url()).await);
    let turn = Some(json!({"model": "default", "input": "Hello."}));
    let (status, kept) = call(reqwest::Method::POST, format!("{a}/v1/responses"), KEY, turn).await;
    assert_eq!(status, 200, "{kept}");
    let url = format!("{a}/v1/responses/{}", kept["id"].as_str().unwrap());

    // The replica that keeps it cannot reach Redis, which keeps it too: deleting it here alone
    // would leave it to the other replicas while the client is told it is gone.
    redis.stall();
    let (status, away) = call(reqwest::Method::DELETE, url.clone(), KEY, None).await;
    redis.resume();
    assert_eq!((status, away["error"]["code"].as_str()), (503, Some("fleet_unavailable")), "{away}");
    let elsewhere = url.replace(&a, &b);
    assert_eq!(call(reqwest::Method::GET, elsewhere.clone(), KEY, None).await.0, 200, "still kept");

    // Asked again once Redis answers: gone everywhere.
    support::until("Redis answers again", std::time::Duration::from_secs(5), async || {
        match call(reqwest::Method::DELETE, url.clone(), KEY, None).await {
            (200, deleted) if deleted["deleted"] == true => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(call(reqwest::Method::GET, elsewhere, KEY, None).await.0, 404);
    assert_eq!(call(reqwest::Method::GET, url, KEY, None).await.0, 404);
}
