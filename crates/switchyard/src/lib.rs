//! # Switchyard
//!
//! Keeps LLM calls working when providers fail: ordered fallback across `provider:model`
//! targets, retries that honour Retry-After, health tracking with circuit breakers and
//! cooldowns, special chains for context-length and content-filter failures, typed events and
//! a complete attempt trail on every answer and every failure.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use switchyard::chat::{ChatRequest, Message};
//! use switchyard::route::Route;
//! use switchyard::simulated::{SimulatedProvider, Step};
//! use switchyard::{ErrorKind, ProviderEntry, Router};
//!
//! let flaky = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
//! let router = Router::builder()
//!     .provider(ProviderEntry::new("flaky", flaky))
//!     .provider(ProviderEntry::new("steady", SimulatedProvider::new()))
//!     .route(Route::builder("default").target("flaky:a").target("steady:b").build().unwrap())
//!     .build()
//!     .unwrap();
//!
//! let answer = router.chat(&ChatRequest::new("default", vec![Message::user("hi")])).await.unwrap();
//! assert_eq!(answer.served_by.to_string(), "steady:b");
//! assert_eq!(answer.trail.len(), 3); // flaky retried, flaky failed, steady ok
//! # }
//! ```
//!
//! The pieces: [`chat`] (canonical types), [`Target`], the error catalog ([`ErrorKind`],
//! [`ProviderError`]), [`route`] (policies), [`Router`], [`health`] (the health board),
//! [`events`], [`trail`], [`provider`] (the trait upstreams implement), [`pacing`] (the seam for
//! client-side pacing; the limiter is the `switchyard-pacing` crate), [`ratelimit`] (what
//! providers' rate-limit headers say), [`time`] (dates and durations as providers write them)
//! and [`simulated`] (a scripted provider).

#![warn(missing_docs)]

pub mod affinity;
pub mod answer_cache;
pub mod assembly;
pub mod backoff;
pub mod bounded;
mod budget;
pub mod chat;
pub mod credential;
mod error;
pub mod events;
pub mod health;
pub mod latency;
pub mod pacing;
pub mod problem;
pub mod provider;
pub mod ratelimit;
pub mod route;
mod router;
pub mod serde_extra;
pub mod shared;
pub mod simulated;
/// Streaming through the router: fail over until the first content chunk, then forward.
pub mod stream {
    pub use crate::router::stream::{RoutedStream, StreamError};
}
mod target;
pub mod time;
pub mod timeouts;
pub mod trace;
pub mod trail;

pub use budget::RetryBudgetSettings;
pub use error::{ErrorKind, HealthEffect, ProviderError, RouteError, UnknownErrorKind, said_back};
pub use router::stream::{RoutedStream, StreamError};
pub use router::{
    AFTER_FINISH, Answer, ConfigError, EmbeddingsAnswer, Forgotten, HedgeWindow, KeyRotation, Price,
    ProviderEntry, RequestOptions, Router, RouterBuilder, TokenCountAnswer,
};
pub use target::{Target, TargetError};
