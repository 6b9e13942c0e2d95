//! Switchyard in front of real providers, as a library: two keys from the environment, an
//! ordered fallback from OpenAI to Anthropic, and the answer streamed as it comes.
//!
//! ```sh
//! OPENAI_API_KEY=... ANTHROPIC_API_KEY=... cargo run -p switchyard-providers --example real_providers
//! ```

use futures_util::StreamExt;
use switchyard::chat::{ChatRequest, Message};
use switchyard::credential::Secret;
use switchyard::route::Route;
use switchyard::{ProviderEntry, RequestOptions, Router};
use switchyard_providers::{ProviderKind, ProviderSettings};

/// The value of `name`, or an error that names it.
fn key(name: &str) -> Result<Secret, String> {
    std::env::var(name).map(Secret::new).map_err(|_| format!("set {name} to an API key"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let openai = switchyard_providers::build(&ProviderSettings::new(ProviderKind::OpenAi))?;
    let anthropic = switchyard_providers::build(&ProviderSettings::new(ProviderKind::Anthropic))?;
    let router = Router::builder()
        .provider(ProviderEntry::from_arc("openai", openai).key(key("OPENAI_API_KEY")?))
        .provider(ProviderEntry::from_arc("anthropic", anthropic).key(key("ANTHROPIC_API_KEY")?))
        .route(
            Route::builder("default")
                .target("openai:gpt-4o-mini")
                .target("anthropic:claude-sonnet-4-5")
                .build()?,
        )
        .build()?;

    let request = ChatRequest::new("default", vec![Message::user("A haiku about trains, please.")]);
    let mut stream = router.chat_stream(&request, &RequestOptions::default()).await?;
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => {
                for choice in &chunk.choices {
                    print!("{}", choice.delta.content.as_deref().unwrap_or_default());
                }
            }
            // After the first content a failure is never a silent restart: it ends the stream.
            Err(failure) => eprintln!("\n[the stream broke: {}]", failure.error),
        }
    }
    println!("\n\nserved by {}\n{}", stream.served_by(), stream.trail());
    Ok(())
}
