//! The fault-injecting steps as a client sees them, in both dialects: streams that end without
//! their terminator, spoil one event, stall, or fail in band; outages that end; rate limits of
//! one model; the numbered words two targets share; prefills continued or refused.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::*;

/// The numbered words `w1 … wN` of a `words=N` answer.
fn words(n: u32) -> String {
    (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

fn chat_prefilled(model: &str, prefill: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [
        {"role": "user", "content": "count"}, {"role": "assistant", "content": prefill}]})
}

/// An Anthropic request whose last message is the assistant's, its text in content blocks.
fn messages_prefilled(model: &str, prefill: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 64, "stream": stream, "messages": [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": [{"type": "text", "text": prefill}]}]})
}

fn openai_content(reply: &Reply) -> String {
    reply.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
}

fn anthropic_content(reply: &Reply) -> String {
    reply.json()["content"][0]["text"].as_str().unwrap().to_owned()
}

/// Reads `response` until `done` says its text so far is all that was to come.
async fn read_until(response: &mut reqwest::Response, endpoint: &str, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    while !done(&text) {
        match tokio::time::timeout(Duration::from_secs(5), response.chunk()).await {
            Ok(Ok(Some(bytes))) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
            other => panic!("{endpoint}: the stream ended or stalled before its part: {other:?}: {text}"),
        }
    }
    text
}

/// The response of `scenario` at `endpoint` to `body`, its body not read yet.
async fn open(mock: &Mock, scenario: &str, endpoint: &str, body: &Value) -> reqwest::Response {
    mock.client.post(mock.url(scenario, endpoint)).body(body.to_string()).send().await.unwrap()
}

/// Checks that `response` sends nothing more and is held open (a hanging request) until the
/// client goes.
async fn held_until_its_client_goes(mock: &Mock, mut response: reqwest::Response, endpoint: &str) {
    let after = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
    assert!(after.is_err(), "{endpoint}: the stream ended or went on: {after:?}");
    released_when_its_client_goes(mock, response, endpoint).await;
}

/// Checks that `response` is held open (a hanging request) until the client goes.
async fn released_when_its_client_goes(mock: &Mock, response: reqwest::Response, endpoint: &str) {
    assert_eq!(mock.hanging().await, 1, "{endpoint}: the stream is held open");
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(5);
    while mock.hanging().await != 0 {
        assert!(Instant::now() < deadline, "{endpoint}: the held stream outlived its client");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn noterm_streams_whole_answers_without_their_terminator() {
    let mock = Mock::start().await;
    let stream = mock.stream("noterm~chunks=3", CHAT, &chat_stream("m", true)).await;
    assert!(stream.clean_end, "the body itself ends cleanly");
    assert!(stream.events.iter().all(|e| e.data != "[DONE]"));
    let chunks = openai_chunks(&stream);
    assert_eq!(openai_text(&stream), "mock answer from m");
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 3);

    let stream = mock.stream("noterm~chunks=2", MESSAGES, &messages_stream("c")).await;
    assert!(stream.clean_end);
    let names = anthropic_names(&stream);
    assert_eq!(names[names.len() - 2..], ["content_block_stop", "message_delta"]);
    let delta = stream.events.last().unwrap().json();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 2);
    assert_eq!(anthropic_deltas(&stream, "text"), "mock answer from c");
}

#[tokio::test]
async fn noend_streams_whole_answers_without_their_terminator_then_holds_the_stream_open() {
    let mock = Mock::start().await;
    for (endpoint, body, last) in [
        (CHAT, chat_stream("m", true), r#""completion_tokens":"#),
        (MESSAGES, messages_stream("c"), r#""stop_reason":"end_turn""#),
    ] {
        let mut response = open(&mock, "noend~chunks=2", endpoint, &body).await;
        let text =
            read_until(&mut response, endpoint, |text| text.contains(last) && text.ends_with("\n\n")).await;
        assert!(!text.contains("[DONE]") && !text.contains("message_stop"), "{endpoint}: {text}");
        held_until_its_client_goes(&mock, response, endpoint).await;
    }
}

#[tokio::test]
async fn noterm_and_noend_answer_whole_when_not_streamed() {
    let mock = Mock::start().await;
    for step in ["noterm", "noend"] {
        assert_eq!(openai_content(&mock.post(step, CHAT, &chat("m")).await), "mock answer from m");
        assert_eq!(anthropic_content(&mock.post(step, MESSAGES, &messages("c")).await), "mock answer from c");
    }
    assert_eq!(mock.hanging().await, 0);
}

#[tokio::test]
async fn badevent_makes_one_event_of_a_whole_stream_unreadable() {
    let mock = Mock::start().await;
    let stream = mock.stream("badevent=3~words=5", CHAT, &chat_stream("m", true)).await;
    assert!(stream.clean_end);
    let unreadable: Vec<usize> = (0..stream.events.len())
        .filter(|&i| serde_json::from_str::<Value>(&stream.events[i].data).is_err())
        .collect();
    // The last event is `[DONE]`, which is no JSON either.
    assert_eq!(unreadable, [2, stream.events.len() - 1]);
    assert_eq!(stream.events.last().unwrap().data, "[DONE]");
    let readable = Stream {
        status: stream.status,
        events: stream.events.into_iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, e)| e).collect(),
        clean_end: true,
        trailing: String::new(),
    };
    assert_eq!(openai_text(&readable), words(5), "no content is lost to the bad event");

    let stream = mock.stream("badevent=5~words=5", MESSAGES, &messages_stream("c")).await;
    let bad = &stream.events[4];
    assert_eq!(bad.name.as_deref(), Some("content_block_delta"));
    assert!(serde_json::from_str::<Value>(&bad.data).is_err(), "{}", bad.data);
    assert_eq!(anthropic_names(&stream).last(), Some(&"message_stop"));
    let text: String = stream
        .events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|data| data["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, words(5));
}

#[tokio::test]
async fn stall_sends_its_chunks_then_holds_the_stream_open_until_the_client_goes() {
    let mock = Mock::start().await;
    for (endpoint, body) in [(CHAT, chat_stream("m", true)), (MESSAGES, messages_stream("c"))] {
        let mut response = open(&mock, "stall=2~words=6", endpoint, &body).await;
        let text = read_until(&mut response, endpoint, |text| text.contains(r#"" w2""#)).await;
        assert!(text.contains(r#""w1""#) && !text.contains("w3"), "{endpoint}: {text}");
        held_until_its_client_goes(&mock, response, endpoint).await;
    }
}

#[tokio::test]
async fn keepalive_sends_its_chunks_then_empty_deltas_while_it_holds_the_stream_open() {
    let mock = Mock::start().await;
    let empty =
        [(CHAT, r#""delta":{"content":""}"#), (MESSAGES, r#""delta":{"type":"text_delta","text":""}"#)];
    for ((endpoint, body), (_, delta)) in
        [(CHAT, chat_stream("m", true)), (MESSAGES, messages_stream("c"))].into_iter().zip(empty)
    {
        let mut response = open(&mock, "keepalive=2~words=6", endpoint, &body).await;
        let text = read_until(&mut response, endpoint, |text| text.matches(delta).count() >= 2).await;
        assert!(text.contains(r#"" w2""#) && !text.contains("w3"), "{endpoint}: {text}");
        assert!(!text.contains("[DONE]") && !text.contains("message_stop"), "{endpoint}: {text}");
        released_when_its_client_goes(&mock, response, endpoint).await;
    }
}

#[tokio::test]
async fn errevent_sends_its_chunks_then_an_openai_error_event_and_ends() {
    let mock = Mock::start().await;
    let stream = mock.stream("errevent=2~words=5", CHAT, &chat_stream("m", true)).await;
    assert!(stream.clean_end);
    assert_eq!(openai_text(&stream), "w1 w2");
    let error = stream.events.last().unwrap().json();
    assert_eq!(error["error"]["type"], "server_error");
    assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(error["error"].get("code").is_some());
    assert!(
        stream.events.iter().all(|e| e.data != "[DONE]" && !e.data.contains(r#""finish_reason":"stop""#))
    );

    let stream = mock.stream("errevent=0", CHAT, &chat_stream("m", true)).await;
    assert_eq!(openai_text(&stream), "", "an error before any content");
    assert_eq!(stream.events.last().unwrap().json()["error"]["type"], "server_error");
}

#[tokio::test]
async fn errevent_sends_its_chunks_then_an_anthropic_overloaded_error_and_ends() {
    let mock = Mock::start().await;
    let stream = mock.stream("errevent=2~words=5", MESSAGES, &messages_stream("c")).await;
    assert!(stream.clean_end);
    assert_eq!(anthropic_deltas(&stream, "text"), "w1 w2");
    let last = stream.events.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("error"));
    assert_eq!(
        last.json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    assert!(!anthropic_names(&stream).contains(&"message_stop"));

    let stream = mock.stream("errevent=0", MESSAGES, &messages_stream("c")).await;
    assert_eq!(anthropic_names(&stream), ["message_start", "content_block_start", "ping", "error"]);
}

#[tokio::test]
async fn errevent_without_stream_is_the_error_as_its_status() {
    let mock = Mock::start().await;
    let reply = mock.post("errevent=1", CHAT, &chat("m")).await;
    assert_eq!(reply.status.as_u16(), 500);
    assert_eq!(reply.json()["error"]["type"], "server_error");
    let reply = mock.post("errevent=1", MESSAGES, &messages("c")).await;
    assert_eq!(reply.status.as_u16(), 529);
    assert_eq!(reply.json()["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn down_answers_503_from_its_first_request_until_the_outage_ends_then_ok() {
    let mock = Mock::start().await;
    let outage = Duration::from_secs(1);
    assert_eq!(mock.post("down=1s", CHAT, &chat("m")).await.status.as_u16(), 503);
    // The first request arrived before its answer: the outage ends at most `outage` after this.
    let answered = Instant::now();
    let reply = mock.post("down=1s", MESSAGES, &messages("c")).await;
    assert_eq!(reply.status.as_u16(), 503, "the outage is the scenario's, across endpoints");
    assert_eq!(reply.json()["error"]["type"], "api_error");
    // The wait the fault itself needs: the outage is measured from the first request's arrival.
    tokio::time::sleep(outage.saturating_sub(answered.elapsed())).await;
    assert_eq!(openai_content(&mock.post("down=1s", CHAT, &chat("m")).await), "mock answer from m");
    assert_eq!(mock.stats().await["scenarios"]["down=1s"]["requests"], 3);
}

#[tokio::test]
async fn model429_limits_only_the_named_model_without_retry_after() {
    let mock = Mock::start().await;
    let reply = mock.post("model429=gpt-a", CHAT, &chat("gpt-a")).await;
    assert_eq!(reply.status.as_u16(), 429);
    assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("gpt-a"));
    assert!(reply.headers.get("retry-after").is_none());
    assert!(reply.headers.keys().all(|name| !name.as_str().starts_with("x-ratelimit")));
    assert_eq!(
        openai_content(&mock.post("model429=gpt-a", CHAT, &chat("gpt-b")).await),
        "mock answer from gpt-b"
    );

    let reply = mock.post("model429=claude-a", MESSAGES, &messages("claude-a")).await;
    assert_eq!(reply.status.as_u16(), 429);
    assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
    assert!(reply.headers.get("retry-after").is_none());
    let reply = mock.post("model429=claude-a", MESSAGES, &messages("claude-b")).await;
    assert_eq!(anthropic_content(&reply), "mock answer from claude-b");
}

#[tokio::test]
async fn words_are_the_same_numbered_words_for_every_model_one_per_chunk() {
    let mock = Mock::start().await;
    assert_eq!(openai_content(&mock.post("ok~words=7", CHAT, &chat("gpt-a")).await), words(7));
    let reply = mock.post("ok~words=7", MESSAGES, &messages("claude-b")).await;
    assert_eq!(anthropic_content(&reply), words(7));
    assert_eq!(reply.json()["usage"]["output_tokens"], 7);

    let stream = mock.stream("ok~words=7", CHAT, &chat_stream("gpt-a", true)).await;
    let pieces: Vec<String> = content_events(&stream)
        .iter()
        .map(|e| e.json()["choices"][0]["delta"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pieces, ["w1", " w2", " w3", " w4", " w5", " w6", " w7"]);
    assert_eq!(openai_chunks(&stream).last().unwrap()["usage"]["completion_tokens"], 7);

    let stream = mock.stream("ok~words=7", MESSAGES, &messages_stream("claude-b")).await;
    assert_eq!(content_events(&stream).len(), 7);
    assert_eq!(anthropic_deltas(&stream, "text"), words(7));
}

#[tokio::test]
async fn a_cut_of_numbered_words_stops_after_the_words_it_names() {
    let mock = Mock::start().await;
    let stream = mock.stream("cut=4~words=9", CHAT, &chat_stream("m", true)).await;
    assert!(!stream.clean_end);
    assert_eq!(openai_text(&stream), words(4));
    let stream = mock.stream("cut=4~words=9", MESSAGES, &messages_stream("c")).await;
    assert_eq!(anthropic_deltas(&stream, "text"), words(4));
}

#[tokio::test]
async fn a_prefill_is_continued_with_the_rest_of_the_script_whole_and_streamed() {
    let mock = Mock::start().await;
    // Trailing whitespace of the prefill is ignored, as callers trim it for Anthropic.
    let reply = mock.post("ok~words=6", CHAT, &chat_prefilled("m", "w1 w2 w3 ", false)).await;
    assert_eq!(openai_content(&reply), " w4 w5 w6");
    assert_eq!(reply.json()["usage"]["completion_tokens"], 3);
    let stream = mock.stream("ok~words=6", CHAT, &chat_prefilled("m", "w1 w2 w3", true)).await;
    assert_eq!(openai_text(&stream), " w4 w5 w6");
    assert_eq!(content_events(&stream).len(), 3);

    let reply = mock.post("ok~words=6", MESSAGES, &messages_prefilled("c", "w1 w2", false)).await;
    assert_eq!(anthropic_content(&reply), " w3 w4 w5 w6");
    let stream = mock.stream("ok~words=6", MESSAGES, &messages_prefilled("c", "w1 w2", true)).await;
    assert_eq!(anthropic_deltas(&stream, "text"), " w3 w4 w5 w6");

    let reply = mock.post("ok", CHAT, &chat_prefilled("gpt-x", "mock answer", false)).await;
    assert_eq!(openai_content(&reply), " from gpt-x", "the default text is continued too");
}

#[tokio::test]
async fn a_prefill_the_script_does_not_begin_with_gets_other_text() {
    let mock = Mock::start().await;
    let reply = mock.post("ok~words=3", CHAT, &chat_prefilled("m", "v1 v2", false)).await;
    assert_eq!(openai_content(&reply), words(3), "the whole script, as a model ignoring the prefill");
    let reply =
        mock.post("ok", MESSAGES, &messages_prefilled("claude-b", "mock answer from claude-a", false)).await;
    assert_eq!(anthropic_content(&reply), "mock answer from claude-b");
}

#[tokio::test]
async fn a_broken_continuation_breaks_within_the_rest_of_the_script() {
    let mock = Mock::start().await;
    let stream = mock.stream("cut=2~words=6", CHAT, &chat_prefilled("m", "w1 w2", true)).await;
    assert!(!stream.clean_end);
    assert_eq!(openai_text(&stream), " w3 w4");
}

#[tokio::test]
async fn noprefill_refuses_a_request_ending_with_the_assistant_and_answers_others() {
    let mock = Mock::start().await;
    let reply = mock.post("noprefill", CHAT, &chat_prefilled("m", "w1", false)).await;
    assert_eq!(reply.status.as_u16(), 400);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not support assistant message prefill")
    );
    assert_eq!(openai_content(&mock.post("noprefill", CHAT, &chat("m")).await), "mock answer from m");

    let reply = mock.post("noprefill", MESSAGES, &messages_prefilled("c", "w1", true)).await;
    assert_eq!(reply.status.as_u16(), 400);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("prefill"));
    assert_eq!(
        anthropic_content(&mock.post("noprefill", MESSAGES, &messages("c")).await),
        "mock answer from c"
    );
}

#[tokio::test]
async fn the_responses_dialect_says_the_words_and_fails_in_band_with_an_error_event() {
    let mock = Mock::start().await;
    let body = json!({"model": "gpt-r", "input": "count", "stream": true});
    let stream = mock.stream("ok~words=3", "v1/responses", &body).await;
    let text: String = stream
        .events
        .iter()
        .filter(|e| e.name.as_deref() == Some("response.output_text.delta"))
        .map(|e| e.json()["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, words(3));
    assert_eq!(stream.events.last().unwrap().name.as_deref(), Some("response.completed"));

    let stream = mock.stream("errevent=1~words=3", "v1/responses", &body).await;
    let last = stream.events.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("error"));
    assert_eq!(last.json()["code"], "server_error");
}
