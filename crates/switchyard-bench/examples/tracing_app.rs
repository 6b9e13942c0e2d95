//! Measures what exporting traces costs a request: the same chats through the gateway's HTTP
//! app (its handlers, routing, metrics, trail, log line) without telemetry and with every
//! request traced (`sampler: always_on`) and exported as OTLP/protobuf to a collector on
//! loopback, in interleaved rounds.
//!
//! `bench/run micro tracing_app [requests per round]` (`cargo run --release -p switchyard-bench
//! --example tracing_app`)
//!
//! CPU is every thread of this process (`/proc/self/task/*/schedstat`): the handlers, the
//! batch processor's thread, the exporter's HTTP calls and the test collector's reading of
//! them (which a real deployment does not pay: it is counted, so the figure is an upper
//! bound). A traced round ends only once its spans are exported.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};
use tower_service::Service;

const PROVIDERS: &str = r#"
providers:
  sim: { kind: simulated, reply: "Paris." }
routes:
  default: { targets: [sim:model] }
"#;

const BODY: &str = r#"{"model":"default","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}]}"#;

/// CPU time of every thread of this process so far.
fn process_cpu() -> Duration {
    let mut total = 0u64;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            total += stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}

async fn collector() -> Result<(String, Arc<AtomicU64>), Box<dyn std::error::Error>> {
    let spans_bytes = Arc::new(AtomicU64::new(0));
    let count = spans_bytes.clone();
    let router = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let count = count.clone();
            async move {
                count.fetch_add(body.len() as u64, Ordering::Relaxed);
                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok((format!("http://{addr}"), spans_bytes))
}

fn state(telemetry: Option<&str>) -> Result<Arc<AppState>, Box<dyn std::error::Error>> {
    let yaml = match telemetry {
        Some(endpoint) => {
            format!("{PROVIDERS}telemetry: {{ endpoint: \"{endpoint}\", sampler: always_on }}\n")
        }
        None => PROVIDERS.to_owned(),
    };
    let file = config::parse(&yaml, false, "bench.yaml")?;
    let loaded = config::build(file, config::Source::File("bench.yaml".into()), &|_| None)?;
    Ok(AppState::new(loaded.router, loaded.gateway))
}

/// CPU per request of `requests` chats through `state`'s app, its exports included.
async fn round(state: &Arc<AppState>, requests: u32) -> Result<Duration, Box<dyn std::error::Error>> {
    let mut service = app(state.clone());
    let before = process_cpu();
    for _ in 0..requests {
        let request = Request::post("/v1/chat/completions")
            .header("content-type", "application/json")
            .body(Body::from(BODY))?;
        let response = service.call(request).await?;
        assert_eq!(response.status(), 200);
        axum::body::to_bytes(response.into_body(), 1 << 20).await?;
    }
    if let Some(telemetry) = state.telemetry.clone() {
        tokio::task::spawn_blocking(move || telemetry.flush()).await?;
    }
    Ok((process_cpu() - before) / requests.max(1))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let (endpoint, exported) = collector().await?;
    let off = state(None)?;
    let on = state(Some(&endpoint))?;
    // Warm both: pools, allocator, the exporter's connection.
    round(&off, requests / 10).await?;
    round(&on, requests / 10).await?;
    let (mut offs, mut ons) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        offs.push(round(&off, requests).await?);
        ons.push(round(&on, requests).await?);
    }
    let show = |d: &Duration| format!("{:.1}", d.as_secs_f64() * 1e6);
    println!("CPU per request, µs, five interleaved rounds of {requests}:");
    println!("  off:       {}", offs.iter().map(show).collect::<Vec<_>>().join(", "));
    println!("  always_on: {}", ons.iter().map(show).collect::<Vec<_>>().join(", "));
    offs.sort();
    ons.sort();
    let (off_median, on_median) = (offs[2].as_secs_f64(), ons[2].as_secs_f64());
    println!(
        "  medians: off {:.1} µs, always_on {:.1} µs: {:+.1}%",
        off_median * 1e6,
        on_median * 1e6,
        (on_median / off_median - 1.0) * 100.0
    );
    println!("  exported {} bytes of OTLP/protobuf", exported.load(Ordering::Relaxed));
    Ok(())
}

/// The gateway's allocator, as `switchyard serve` runs with it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
