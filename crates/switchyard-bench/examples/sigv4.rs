//! What SigV4 costs a Bedrock request: signing one InvokeModel request as the adapter does
//! (`aws-sigv4`: the canonical request over the path, the headers and a SHA-256 of the body,
//! the string to sign, the derived key and the HMAC), for a short and a long body, and taking
//! kept credentials from the provider's cache.
//!
//! `bench/run micro sigv4 [signatures]` (`cargo run --release -p switchyard-bench --example sigv4`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use http::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderValue};
use switchyard_providers::bedrock::{CredentialCache, model_path, sign_request};
use switchyard_providers::http::post_bytes;

fn credentials() -> Credentials {
    Credentials::new(
        "ASIAEXAMPLEEXAMPLE01",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        Some("IQoJb3JpZ2luX2VjEXAMPLE".repeat(20)),
        None,
        "bench",
    )
}

/// A Messages body of about `size` bytes.
fn body(size: usize) -> bytes::Bytes {
    let text = "lorem ipsum ".repeat(size / 12);
    bytes::Bytes::from(format!(
        r#"{{"anthropic_version":"bedrock-2023-05-31","max_tokens":1024,"messages":[{{"role":"user","content":"{text}"}}]}}"#
    ))
}

fn per_signature(body: &bytes::Bytes, signatures: u32) -> Result<Duration, Box<dyn std::error::Error>> {
    let credentials = credentials();
    let url = format!(
        "https://bedrock-runtime.us-east-1.amazonaws.com{}",
        model_path("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "invoke-with-response-stream")
    );
    let uri: http::Uri = url.parse()?;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCEPT, HeaderValue::from_static("application/vnd.amazon.eventstream"));
    headers.insert(HOST, HeaderValue::from_static("bedrock-runtime.us-east-1.amazonaws.com"));
    let start = Instant::now();
    for _ in 0..signatures {
        let mut request = post_bytes(uri.clone(), headers.clone(), body.clone());
        sign_request(&mut request, body, &credentials, "us-east-1", SystemTime::now())?;
        std::hint::black_box(request);
    }
    Ok(start.elapsed() / signatures.max(1))
}

async fn per_lookup(lookups: u32) -> Result<Duration, Box<dyn std::error::Error>> {
    let cache =
        Arc::new(CredentialCache::with_provider("us-east-1", SharedCredentialsProvider::new(credentials())));
    cache.get().await?;
    let start = Instant::now();
    for _ in 0..lookups {
        std::hint::black_box(cache.get().await?);
    }
    Ok(start.elapsed() / lookups.max(1))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let signatures: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let (short, long) = (body(2_000), body(100_000));
    let mut best = (Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        best.0 = best.0.min(per_signature(&short, signatures)?);
        best.1 = best.1.min(per_signature(&long, signatures / 10)?);
        best.2 = best.2.min(per_lookup(signatures * 10).await?);
    }
    println!("signatures per run:                {signatures} (a tenth for the long body)");
    println!("sign, 2 kB body:                   {:>8.2} µs", best.0.as_nanos() as f64 / 1000.0);
    println!("sign, 100 kB body:                 {:>8.2} µs", best.1.as_nanos() as f64 / 1000.0);
    println!("kept credentials from the cache:   {:>8.0} ns", best.2.as_nanos() as f64);
    Ok(())
}
