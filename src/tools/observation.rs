//! What the model is told when a call cannot give it a result: every failure text in one
//! place, so the model (and a client reading thoughts) sees the same words for the same case.

use std::time::Duration;

use serde_json::{Map, Value};

use super::Invocation;
use crate::domain::{CallOutcome, ToolInvokeMeta};

/// The model called a tool the run does not offer.
pub fn unknown_tool(name: &str) -> String {
    format!("there is not a tool named {name}")
}

/// The call's arguments do not fit the tool's schema.
pub fn invalid_arguments(reason: &str) -> String {
    format!("tool parameters validation error: {reason}, please check your tool parameters")
}

/// The tool ran and failed.
pub fn invoke_error(detail: &dyn std::fmt::Display) -> String {
    format!("tool invoke error: {detail}")
}

/// The tool did not finish in time.
pub fn timed_out(timeout: Duration) -> String {
    invoke_error(&format_args!(
        "the tool did not finish within {}s",
        timeout.as_secs_f64()
    ))
}

/// The call needed approval and was declined; the model learns why, so it can adapt.
pub fn declined(reason: &str) -> String {
    let reason = reason.trim();
    if reason.is_empty() {
        "the user declined this call".to_owned()
    } else {
        format!("the user declined this call: {reason}")
    }
}

/// A call that succeeded with `output`: its text is the observation, and its passages
/// (or, when it names none, those its text holds) the evidence.
pub fn success(
    provider: String,
    output: super::ToolOutput,
    time_cost: f64,
    tool_config: Map<String, Value>,
) -> Invocation {
    let resources = if output.resources.is_empty() {
        super::records::resources_in(&output.text)
    } else {
        output.resources
    };
    Invocation {
        provider,
        outcome: CallOutcome::Success,
        files: output.files,
        resources,
        meta: ToolInvokeMeta {
            time_cost,
            error: None,
            tool_config,
            usage: None,
            tool_calls: 0,
        },
        observation: output.text,
    }
}

/// A failed call: the text is both the observation and `meta.error`.
pub fn failure(
    outcome: CallOutcome,
    provider: String,
    text: String,
    time_cost: f64,
    tool_config: Map<String, Value>,
) -> Invocation {
    Invocation {
        provider,
        outcome,
        files: Vec::new(),
        resources: Vec::new(),
        meta: ToolInvokeMeta {
            time_cost,
            error: Some(text.clone()),
            tool_config,
            usage: None,
            tool_calls: 0,
        },
        observation: text,
    }
}
