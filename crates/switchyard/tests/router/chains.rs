//! Special chains: context-length failures go to bigger models, content-filter refusals to
//! differently governed ones, once.

use futures_util::StreamExt;
use switchyard::ErrorKind;
use switchyard::RequestOptions;
use switchyard::chat::FinishReason;
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn context_length_switches_to_the_context_window_chain_instead_of_the_general_chain() {
    let small = SimulatedProvider::new().script([Step::fail(ErrorKind::ContextLength)]);
    let general = SimulatedProvider::new();
    let big = SimulatedProvider::new().reply("read it all");
    let route = Route::builder("default")
        .target("small:m")
        .target("general:m")
        .context_window("big:m")
        .retry(quick_retry(3));
    let router = router(&[("small", &small), ("general", &general), ("big", &big)], route);

    let answer = router.chat(&request("default")).await.expect("the big model answers");

    assert_eq!(answer.served_by.to_string(), "big:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(answer.trail.attempts()[0].error_kind(), Some(ErrorKind::ContextLength));
    assert_eq!(small.calls(), 1, "the same prompt is the same size: never retried");
    assert_eq!(general.calls(), 0, "the general chain is replaced, not continued");
}

#[tokio::test(start_paused = true)]
async fn context_length_without_a_context_window_chain_is_returned_as_is() {
    let small = SimulatedProvider::new().script([Step::fail(ErrorKind::ContextLength)]);
    let general = SimulatedProvider::new();
    let router = router(
        &[("small", &small), ("general", &general)],
        Route::builder("default").target("small:m").target("general:m"),
    );

    let error = router.chat(&request("default")).await.expect_err("no chain for it");
    assert_eq!(error.kind(), Some(ErrorKind::ContextLength));
    assert_eq!(general.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_content_filter_refusal_is_redirected_to_the_content_policy_targets() {
    let strict = SimulatedProvider::new().script([Step::ContentFilter]);
    let general = SimulatedProvider::new();
    let lenient = SimulatedProvider::new().reply("here you go");
    let route = Route::builder("default").target("strict:m").target("general:m").content_policy("lenient:m");
    let router = router(&[("strict", &strict), ("general", &general), ("lenient", &lenient)], route);

    let answer = router.chat(&request("default")).await.expect("the lenient model answers");

    assert_eq!(answer.response.text().as_deref(), Some("here you go"));
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
    assert_eq!(answer.trail.attempts()[0].error_kind(), Some(ErrorKind::ContentFiltered));
    assert_eq!(general.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_content_policy_redirect_happens_at_most_once() {
    let strict = SimulatedProvider::new().script([Step::ContentFilter]);
    let lenient = SimulatedProvider::new().script([Step::ContentFilter]);
    let route = Route::builder("default").target("strict:m").content_policy("lenient:m");
    let router = router(&[("strict", &strict), ("lenient", &lenient)], route);

    let answer = router.chat(&request("default")).await.expect("the second refusal surfaces normally");

    assert!(answer.response.is_content_filtered());
    assert_eq!(answer.served_by.to_string(), "lenient:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
    assert_eq!((strict.calls(), lenient.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_without_content_policy_targets_is_the_answer() {
    let strict = SimulatedProvider::new().script([Step::ContentFilter]);
    let general = SimulatedProvider::new();
    let router = router(
        &[("strict", &strict), ("general", &general)],
        Route::builder("default").target("strict:m").target("general:m"),
    );

    let answer = router.chat(&request("default")).await.unwrap();
    assert!(answer.response.is_content_filtered());
    assert_eq!(general.calls(), 0, "a refusal is not a provider failure");
    let served = &answer.trail.attempts()[0];
    assert_eq!(served.outcome, Outcome::Ok);
    let note = served.note.as_deref().unwrap_or_default();
    assert!(note.contains("content filter stopped the answer"), "the trail says what was served: {note:?}");
}

#[tokio::test(start_paused = true)]
async fn a_streamed_refusal_before_any_content_is_redirected() {
    let strict = SimulatedProvider::new().script([Step::ContentFilter]);
    let lenient = SimulatedProvider::new().reply("streamed answer");
    let route = Route::builder("default").target("strict:m").content_policy("lenient:m");
    let router = router(&[("strict", &strict), ("lenient", &lenient)], route);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("no failure");
        assert!(!chunk.is_content_filtered(), "the refusal never reaches the caller");
        text.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
    }
    assert_eq!(text, "streamed answer");
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_content_filter_after_streamed_content_is_never_redirected() {
    // The provider streams two pieces of text, then its filter cuts the answer.
    let strict = SimulatedProvider::new().script([Step::FilterAfter(2)]);
    let lenient = SimulatedProvider::new();
    let route = Route::builder("default").target("strict:m").content_policy("lenient:m");
    let router = router(&[("strict", &strict), ("lenient", &lenient)], route);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut content_chunks = 0;
    let mut finish = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("a refusal is not a failure");
        content_chunks += usize::from(chunk.has_content());
        if let Some(reason) = chunk.choices.first().and_then(|c| c.finish_reason.clone()) {
            finish = Some(reason);
        }
    }
    assert_eq!(content_chunks, 2, "what was streamed stays streamed");
    assert_eq!(finish, Some(FinishReason::ContentFilter), "the refusal surfaces as it came");
    assert_eq!(lenient.calls(), 0, "no silent restart after content reached the caller");
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Ok]);
    let note = stream.trail().attempts()[0].note.clone().unwrap_or_default();
    assert_eq!(
        note.matches("content filter stopped the answer").count(),
        1,
        "the trail says, once, that the filter cut the answer: {note:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_content_filtered_error_is_redirected_to_the_content_policy_targets() {
    // Azure refuses with an HTTP 400 whose code is content_filter.
    let strict = SimulatedProvider::new().script([Step::fail(ErrorKind::ContentFiltered)]);
    let lenient = SimulatedProvider::new();
    let route = Route::builder("default").target("strict:m").content_policy("lenient:m");
    let router = router(&[("strict", &strict), ("lenient", &lenient)], route);

    let answer = router.chat(&request("default")).await.expect("the lenient model answers");
    assert_eq!(answer.served_by.to_string(), "lenient:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_served_when_the_content_policy_chain_fails() {
    let strict = SimulatedProvider::new().script([Step::ContentFilter]);
    let lenient = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("strict:m")
        .content_policy("lenient:m")
        .retry(quick_retry(1))
        .candidate(switchyard::route::Candidate::text("apology", "busy"));
    let router = router(&[("strict", &strict), ("lenient", &lenient)], route);

    let answer = router.chat(&request("default")).await.expect("the provider's own refusal");
    assert!(answer.response.is_content_filtered());
    assert_eq!(answer.served_by.to_string(), "strict:m", "not the candidate: a refusal is a real answer");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Failed]);
}
