//! The routing engine's specification, one behaviour per test, under tokio's paused clock.

#![allow(clippy::unwrap_used)]

mod affinity;
mod assembled;
mod budget;
mod chains;
mod config;
mod continuation;
mod embeddings;
mod events;
mod fallback;
mod health;
mod hedging;
mod pacing;
mod patterns;
mod properties;
mod reconfigure;
mod recovery;
mod retry;
mod streaming;
mod support;
mod timeouts;
mod tracing;
