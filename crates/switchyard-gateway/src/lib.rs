#![warn(missing_docs)]

//! Switchyard's gateway: the HTTP server any OpenAI or Anthropic SDK can point at, its
//! configuration, and the command line's building blocks.
//!
//! What the `switchyard` binary and the tests use is public: [`config`] (load and check a
//! configuration, from a file, the environment or the demo), [`server`] (the HTTP
//! application over a router), [`reload`] (the configuration's life in a running gateway),
//! [`workers`] (the event loops that serve it) and [`logging`].
//! The rest are the server's rooms.

mod clock;
pub mod config;
pub(crate) mod connection;
pub(crate) mod drills;
pub(crate) mod fleet;
pub mod keys;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod recent;
pub mod reload;
pub(crate) mod responses;
pub mod server;
pub(crate) mod telemetry;
pub mod workers;
