//! What the service tells the people who run it: Prometheus metrics on their own HTTP
//! listener, and OpenTelemetry traces exported over OTLP, both in the names of the
//! OpenTelemetry GenAI semantic conventions where those have one.
//!
//! Metrics live in a [`Metrics`] value per server (so several servers in one process, as
//! in tests, never share counts); tracing is process-wide, set up once by `main`.
//! This room knows neither tonic nor a database.

mod http;
mod logs;
mod metrics;
pub mod traces;

pub use http::{serve_metrics, Page, Pages};
pub use metrics::{LlmCall, Metrics, RunOutcome};
pub use traces::TraceParent;
