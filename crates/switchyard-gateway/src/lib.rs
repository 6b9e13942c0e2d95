//! Switchyard's gateway: the HTTP server any OpenAI or Anthropic SDK can point at, its
//! configuration, and the command line's building blocks.

mod clock;
pub mod config;
pub mod connection;
pub mod drills;
pub mod logging;
pub mod metrics;
pub mod recent;
pub mod responses;
pub mod server;
pub mod telemetry;
pub mod workers;
