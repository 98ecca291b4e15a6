//! Final answers held to a JSON Schema, with both strategies: met at once, met after the
//! one repair round, and not met under each fallback; native structured output for models
//! that have it.

use agent_runner::api::convert::{json_to_struct, struct_to_json};
use agent_runner::pb;
use serde_json::{json, Value};
use tonic::Code;

use crate::support::run_request;
use crate::support::{
    end_of, last_error, message, run_to_end, start, Reply, RunRequestExt, STRUCTURED_MODEL,
};

fn schema() -> Value {
    json!({"type": "object",
           "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
           "required": ["city", "temp"]})
}

const STRATEGIES: [pb::Strategy; 2] = [pb::Strategy::FunctionCalling, pb::Strategy::ChainOfThought];

/// The model's final answer in `strategy`'s form: the document, valid or missing `temp`.
fn answer(strategy: pb::Strategy, valid: bool) -> Reply {
    match (strategy, valid) {
        (pb::Strategy::ChainOfThought, true) => Reply::text(
            &["Thought: I know it.\nAction:\n```json\n{\"action\": \"Final Answer\", \"action_input\": {\"city\": \"Paris\", \"temp\": 21}}\n```"],
            (5, 5),
        ),
        (pb::Strategy::ChainOfThought, false) => Reply::text(
            &["Thought: I know it.\nAction:\n```json\n{\"action\": \"Final Answer\", \"action_input\": {\"city\": \"Paris\"}}\n```"],
            (5, 5),
        ),
        (_, true) => Reply::text(&["{\"city\": \"Paris\", ", "\"temp\": 21}"], (5, 5)),
        (_, false) => Reply::text(&["{\"city\": \"Paris\"}"], (5, 5)),
    }
}

fn asking(strategy: pb::Strategy, fallback: pb::OutputFallback) -> pb::RunRequest {
    let mut request = run_request("Weather in Paris as JSON?", &[]).strategy(strategy);
    let agent = request.agent_mut();
    agent.output_schema = Some(json_to_struct(schema().as_object().unwrap()));
    agent.output_fallback = fallback as i32;
    request
}

fn document(end: &pb::MessageEnd) -> Option<Value> {
    end.structured_output
        .clone()
        .map(|s| Value::Object(struct_to_json(s)))
}

/// The text of every message of a recorded request, for looking into prompts.
fn prompt_text(request: &Value) -> String {
    request["messages"].to_string()
}

/// An answer that meets the output schema at once ends with the parsed document.
#[tokio::test]
async fn a_schema_met_at_once_gives_the_document() {
    for strategy in STRATEGIES {
        let (llm, _server, mut agents) = start(vec![answer(strategy, true)]).await;
        let events = run_to_end(
            &mut agents,
            asking(strategy, pb::OutputFallback::Unspecified),
        )
        .await;
        let end = end_of(&events);
        let expected = json!({"city": "Paris", "temp": 21});
        assert_eq!(document(&end), Some(expected.clone()), "{strategy:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&end.answer).unwrap(),
            expected
        );
        assert!(end.output_invalid.is_empty());
        let stored = message(&mut agents, events[0].message_id.clone()).await;
        let stored_document = stored
            .structured_output
            .map(|s| Value::Object(struct_to_json(s)));
        assert_eq!(stored_document, Some(expected));
        let requests = llm.requests();
        assert_eq!(requests.len(), 1);
        assert!(
            prompt_text(&requests[0]).contains("JSON Schema"),
            "{strategy:?}: instructed"
        );
        assert!(requests[0].get("response_format").is_none());
    }
}

/// An answer that misses the schema gets one repair round; met then, the run ends with the
/// document.
#[tokio::test]
async fn a_schema_met_after_the_repair_round_gives_the_document() {
    for strategy in STRATEGIES {
        let (llm, _server, mut agents) =
            start(vec![answer(strategy, false), answer(strategy, true)]).await;
        let events = run_to_end(&mut agents, asking(strategy, pb::OutputFallback::Error)).await;
        let end = end_of(&events);
        assert_eq!(
            document(&end),
            Some(json!({"city": "Paris", "temp": 21})),
            "{strategy:?}"
        );
        assert_eq!(end.iterations, 2);
        let requests = llm.requests();
        assert_eq!(requests.len(), 2);
        let repair = prompt_text(&requests[1]);
        assert!(
            repair.contains("does not meet the required JSON Schema"),
            "{repair}"
        );
        assert!(repair.contains("temp"), "the problem is named: {repair}");
        assert!(
            requests[1].get("tools").is_none(),
            "a repair round offers no tools"
        );
    }
}

/// Under the text fallback, an answer that never meets the schema ends the run with the
/// text and says the output is invalid.
#[tokio::test]
async fn a_schema_never_met_keeps_the_text_under_the_text_fallback() {
    for strategy in STRATEGIES {
        let (llm, _server, mut agents) =
            start(vec![answer(strategy, false), answer(strategy, false)]).await;
        let events = run_to_end(&mut agents, asking(strategy, pb::OutputFallback::Text)).await;
        let end = end_of(&events);
        assert_eq!(end.finish_reason, pb::FinishReason::Stop as i32);
        assert!(end.structured_output.is_none(), "{strategy:?}");
        assert!(
            end.output_invalid
                .contains("\"temp\" is a required property"),
            "{}",
            end.output_invalid
        );
        assert!(end.answer.contains("Paris"));
        assert_eq!(llm.requests().len(), 2, "one repair round, no more");
        let stored = message(&mut agents, events[0].message_id.clone()).await;
        assert_eq!(stored.status, pb::MessageStatus::Completed as i32);
        assert_eq!(stored.output_invalid, end.output_invalid);
    }
}

/// Under the error fallback, an answer that never meets the schema fails the run.
#[tokio::test]
async fn a_schema_never_met_fails_the_run_under_the_error_fallback() {
    for strategy in STRATEGIES {
        let (_llm, _server, mut agents) =
            start(vec![answer(strategy, false), answer(strategy, false)]).await;
        let events = run_to_end(&mut agents, asking(strategy, pb::OutputFallback::Error)).await;
        let error = last_error(&events);
        assert_eq!(error.code, "output_invalid", "{strategy:?}");
        assert!(error.message.contains("temp"), "{}", error.message);
        let stored = message(&mut agents, events[0].message_id.clone()).await;
        assert_eq!(stored.status, pb::MessageStatus::Failed as i32);
    }
}

/// A model configured with native structured output gets the schema as `response_format`,
/// not as prompt text.
#[tokio::test]
async fn a_model_with_native_structured_output_gets_the_schema_as_response_format() {
    let (llm, _server, mut agents) = start(vec![answer(pb::Strategy::FunctionCalling, true)]).await;
    let request =
        asking(pb::Strategy::FunctionCalling, pb::OutputFallback::Text).model(STRUCTURED_MODEL);
    let events = run_to_end(&mut agents, request).await;
    assert!(end_of(&events).structured_output.is_some());
    let sent = &llm.requests()[0];
    assert_eq!(
        sent["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "final_answer", "schema": schema(), "strict": false}})
    );
    assert!(
        !prompt_text(sent).contains("JSON Schema"),
        "no instruction needed"
    );
}

/// An output schema that does not compile is `INVALID_ARGUMENT` naming the field, before
/// the run starts.
#[tokio::test]
async fn a_schema_that_does_not_compile_is_refused_naming_the_field() {
    let (_llm, _server, mut agents) = start(vec![]).await;
    let mut request = asking(pb::Strategy::FunctionCalling, pb::OutputFallback::Text);
    request.agent_mut().output_schema = Some(json_to_struct(
        json!({"type": "no-such-type"}).as_object().unwrap(),
    ));
    let refused = agents.run(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with("agent.output_schema is not a valid JSON Schema"),
        "{}",
        refused.message()
    );
}
