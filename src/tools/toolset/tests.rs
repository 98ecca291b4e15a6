use std::time::Duration;

use serde_json::{json, Map, Value};

use super::*;
use crate::test_utils::testing_provider;
use crate::tools::ToolRegistry;

fn set(refs: &[(&str, &str, Value)]) -> ToolSet {
    let registry = ToolRegistry::with_builtins().unwrap();
    registry.register_builtin(testing_provider().unwrap());
    let refs: Vec<ToolRef> = refs
        .iter()
        .map(|(provider, name, preset)| ToolRef {
            provider: (*provider).to_owned(),
            name: (*name).to_owned(),
            preset: preset.as_object().cloned().unwrap_or_default(),
            require_approval: false,
        })
        .collect();
    ToolSet::bind(
        &registry.snapshot(&crate::domain::Tenant::default_tenant()),
        &refs,
    )
    .unwrap()
}

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn unknown_tools_become_an_observation() {
    let tools = set(&[]);
    let result = tools.invoke("web_search", "{}", TIMEOUT).await;
    assert_eq!(result.observation, "there is not a tool named web_search");
    assert_eq!(
        result.meta.error.as_deref(),
        Some(result.observation.as_str())
    );
    assert_eq!(result.meta.time_cost, 0.0);
}

#[tokio::test]
async fn malformed_json_is_a_validation_observation() {
    let tools = set(&[("maths", "eval_expression", json!({}))]);
    let result = tools
        .invoke("eval_expression", "{\"expression\": ", TIMEOUT)
        .await;
    assert!(
        result
            .observation
            .starts_with("tool parameters validation error: arguments are not valid JSON"),
        "{}",
        result.observation
    );
    assert_eq!(result.provider, "maths");
}

#[tokio::test]
async fn schema_violations_name_the_field() {
    let tools = set(&[("time", "weekday", json!({}))]);
    let result = tools
        .invoke("weekday", r#"{"year": "2024", "month": 13}"#, TIMEOUT)
        .await;
    let text = result.observation;
    assert!(text.contains("year: "), "{text}");
    assert!(text.contains("month: "), "{text}");
    assert!(text.contains("\"day\" is a required property"), "{text}");
}

#[tokio::test]
async fn presets_override_the_model_and_are_hidden_from_it() {
    let tools = set(&[("maths", "eval_expression", json!({"expression": "6*7"}))]);
    let offered = tools.offered();
    assert_eq!(offered[0].parameters["properties"], json!({}));
    assert_eq!(offered[0].parameters["required"], json!([]));
    let result = tools
        .invoke("eval_expression", r#"{"expression": "1+1"}"#, TIMEOUT)
        .await;
    assert_eq!(result.observation, "42");
    assert_eq!(
        result.meta.tool_config["tool_parameters"],
        json!({"expression": "6*7"})
    );
    assert_eq!(
        result.meta.tool_config["tool_provider_type"],
        json!("builtin")
    );
}

#[tokio::test]
async fn tool_failures_are_invoke_errors() {
    let tools = set(&[("testing", "fail", json!({}))]);
    let result = tools
        .invoke("fail", r#"{"message": "disk full"}"#, TIMEOUT)
        .await;
    assert_eq!(result.observation, "tool invoke error: disk full");
}

#[tokio::test(start_paused = true)]
async fn slow_tools_time_out_into_an_observation() {
    let tools = set(&[("testing", "sleep", json!({}))]);
    let result = tools
        .invoke("sleep", r#"{"ms": 60000}"#, Duration::from_secs(2))
        .await;
    assert_eq!(
        result.observation,
        "tool invoke error: the tool did not finish within 2s"
    );
    assert!(result.meta.time_cost >= 2.0);
}

#[test]
fn configuration_errors_name_the_entry() {
    let registry = ToolRegistry::with_builtins().unwrap();
    let bad = |provider: &str, name: &str| ToolRef {
        provider: provider.into(),
        name: name.into(),
        preset: Map::new(),
        require_approval: false,
    };
    let err = ToolSet::bind(
        &registry.snapshot(&crate::domain::Tenant::default_tenant()),
        &[bad("time", "current_time"), bad("nope", "x")],
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "agent.tools[1].provider: unknown tool provider \"nope\""
    );
    let err = ToolSet::bind(
        &registry.snapshot(&crate::domain::Tenant::default_tenant()),
        &[bad("time", "tomorrow")],
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "agent.tools[0].name: unknown tool \"tomorrow\" of provider \"time\""
    );
}
