//! `switchyard chat`: one request through the library, then its trail.

use std::process::ExitCode;

use futures_util::StreamExt;
use switchyard::chat::{ChatRequest, Message};
use switchyard::trail::{Attempt, Trail, Via};
use switchyard::{RequestOptions, Router};

use super::text::{counted, duration_text};

pub(crate) async fn chat(
    router: &Router,
    model: String,
    stream: bool,
    prompt: String,
) -> anyhow::Result<ExitCode> {
    let request = ChatRequest::new(model, vec![Message::user(prompt)]);
    let options = RequestOptions::default();
    if stream {
        let mut answer = match router.chat_stream(&request, &options).await {
            Ok(answer) => answer,
            Err(error) => return fail_with_trail(&error),
        };
        let mut failed = false;
        while let Some(item) = answer.next().await {
            match item {
                Ok(chunk) => {
                    for choice in &chunk.choices {
                        if let Some(text) = &choice.delta.content {
                            print!("{text}");
                        }
                    }
                }
                Err(error) => {
                    println!("\n[stream failed: {}]", error.error);
                    failed = true;
                }
            }
        }
        println!("\n\n{}", served_line(answer.served_by(), answer.trail(), None));
        print!("{}", trail_lines(answer.trail().attempts()));
        return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    match router.chat_with(&request, &options).await {
        Ok(answer) => {
            println!("{}", answer.response.text().unwrap_or_default());
            println!("\n{}", served_line(&answer.served_by, &answer.trail, Some(answer.timing.total)));
            print!("{}", trail_lines(answer.trail.attempts()));
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => fail_with_trail(&error),
    }
}

/// `served by b:m after 3 attempts (a fallback) in 12.3 ms`.
fn served_line(served_by: &Via, trail: &Trail, took: Option<std::time::Duration>) -> String {
    let mut line = format!("served by {served_by} after {}", counted(trail.len(), "attempt"));
    if trail.fell_back_to(Some(served_by)) {
        line.push_str(" (a fallback)");
    }
    if let Some(took) = took {
        line.push_str(&format!(" in {}", duration_text(took)));
    }
    line
}

/// One line per attempt: `1. down:m  failed  unavailable (HTTP 503)  1.2 ms  [note]`.
fn trail_lines(attempts: &[Attempt]) -> String {
    let mut out = String::new();
    for (n, attempt) in attempts.iter().enumerate() {
        let mut line =
            format!("{:>2}. {:<32} {:<19}", n + 1, attempt.via.to_string(), attempt.outcome.as_str());
        if let Some(error) = &attempt.error {
            line.push_str(&format!(" {}", error.kind()));
            if let Some(status) = error.status() {
                line.push_str(&format!(" (HTTP {status})"));
            }
        }
        line.push_str(&format!(" {}", duration_text(attempt.duration)));
        if let Some(note) = &attempt.note {
            line.push_str(&format!(" [{note}]"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn fail_with_trail(error: &switchyard::RouteError) -> anyhow::Result<ExitCode> {
    eprintln!("error: {error}");
    // A request refused before any target was asked (an unknown route) has no trail to show.
    if !error.trail().is_empty() {
        eprintln!("after {}:", counted(error.trail().len(), "attempt"));
        eprint!("{}", trail_lines(error.trail()));
    }
    Ok(ExitCode::FAILURE)
}
