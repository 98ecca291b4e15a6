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
