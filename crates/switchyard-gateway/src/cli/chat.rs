//! `switchyard chat`: one request through the library, then its trail.

use std::process::ExitCode;

use futures_util::StreamExt;
use switchyard::chat::{ChatRequest, Message};
use switchyard::{RequestOptions, Router};

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
        println!("\n\nserved by {}\n{}", answer.served_by(), answer.trail());
        return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    match router.chat_with(&request, &options).await {
        Ok(answer) => {
            println!("{}", answer.response.text().unwrap_or_default());
            println!("\nserved by {} in {:?}\n{}", answer.served_by, answer.timing.total, answer.trail);
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => fail_with_trail(&error),
    }
}

fn fail_with_trail(error: &switchyard::RouteError) -> anyhow::Result<ExitCode> {
    eprintln!("error: {error}");
    for (n, attempt) in error.trail().iter().enumerate() {
        let kind = attempt.error_kind().map(|k| k.to_string()).unwrap_or_default();
        eprintln!("{:>2}. {:<32} {:<17} {kind}", n + 1, attempt.via.to_string(), attempt.outcome.as_str());
    }
    Ok(ExitCode::FAILURE)
}
