//! Scripted models and deterministic tools for tests of this crate and of services built on
//! it: drive the agent loop without a network.
//!
//! Compiled only with `cfg(test)` or the `test-utils` feature.

mod model;
mod tools;

pub use model::{ScriptedChatModel, ScriptedTurn};
pub use tools::{
    testing_provider, ChartTool, FailingTool, RendezvousTool, SleepTool, CHART_BYTES,
    TESTING_PROVIDER,
};

/// Says that the running test is skipped, and why, where `cargo test` shows it by default.
///
/// The test harness captures what `println!` and `eprintln!` print and shows it only for
/// failing tests; a test that returns early because PostgreSQL or NATS is absent passes, so
/// its reason would be hidden. A write to the stderr handle itself is not captured.
pub fn say_skipped(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}
