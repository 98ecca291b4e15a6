#![allow(clippy::wildcard_enum_match_arm)]

//! The loop's state transitions, driven through the runner with a scripted model over a
//! temporary store: no server, no network.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::domain::{EventEnvelope, FinishReason, MessageStatus, RunEvent, Tenant};
use crate::llm::{CallPolicy, LlmError, ModelEntry, ModelRegistry, RetryPolicy};
use crate::runner::{AgentSpec, ClientOutput, ModelSpec, RunSpec, Runner, RunnerSettings};
use crate::store::Store;
use crate::test_utils::{testing_provider, ScriptedChatModel, ScriptedTurn};
use crate::tools::{ClientToolSpec, ToolRef, ToolRegistry};

const PROVIDER: &str = "scripted";

fn runner(model: Arc<ScriptedChatModel>) -> (Runner, Store) {
    let store = Store::temporary().unwrap();
    let mut models = ModelRegistry::default();
    models.insert(PROVIDER, model, &[ModelEntry::unlisted("m")], false);
    models.set_policy(
        PROVIDER,
        CallPolicy {
            retry: RetryPolicy {
                max_retries: 2,
                base: Duration::from_millis(1),
                max_delay: Duration::from_millis(20),
            },
            ..CallPolicy::default()
        },
    );
    let tools = ToolRegistry::with_builtins().unwrap();
    tools.register_builtin(testing_provider().unwrap());
    let settings = RunnerSettings {
        client_tool_timeout: Duration::from_secs(5),
        approval_timeout: Duration::from_secs(5),
        ..RunnerSettings::default()
    };
    let runner = Runner::new(store.clone(), Arc::new(models), Arc::new(tools), settings);
    (runner, store)
}

fn spec(tools: &[(&str, &str)]) -> RunSpec {
    RunSpec {
        agent: AgentSpec {
            model: ModelSpec {
                provider: PROVIDER.into(),
                name: "m".into(),
                ..ModelSpec::default()
            },
            max_iteration: 10,
            tools: tools
                .iter()
                .map(|(provider, name)| ToolRef {
                    provider: (*provider).into(),
                    name: (*name).into(),
                    preset: Default::default(),
                    require_approval: false,
                })
                .collect(),
            ..AgentSpec::default()
        },
        ..RunSpec::new(Tenant::default_tenant(), "question")
    }
}

async fn run_to_end(runner: &Runner, spec: RunSpec) -> Vec<EventEnvelope> {
    let handle = runner.start(spec, runner.run_token()).await.unwrap();
    drain(handle.events).await
}

/// Every event of a stream that must not fail.
async fn drain(events: crate::runner::EventStream) -> Vec<EventEnvelope> {
    events.map(|event| event.expect("an event")).collect().await
}

/// Reads events up to and including the first that `stop` picks.
async fn read_until(
    events: &mut crate::runner::EventStream,
    stop: impl Fn(&RunEvent) -> bool,
) -> Vec<EventEnvelope> {
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.expect("an event");
        let last = stop(&event.event);
        seen.push(event);
        if last {
            break;
        }
    }
    seen
}

fn deltas(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::AnswerDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn end(events: &[EventEnvelope]) -> (String, FinishReason, u32) {
    match events.last().map(|e| &e.event) {
        Some(RunEvent::MessageEnd(end)) => (end.answer.clone(), end.finish_reason, end.iterations),
        other => panic!("the last event is not an end: {other:?}"),
    }
}

#[tokio::test]
async fn the_answer_is_every_rounds_text_exactly_as_the_deltas_showed_it() {
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::calls(
            "Let me compute.",
            &[("c1", "eval_expression", r#"{"expression": "6*7"}"#)],
        ),
        ScriptedTurn::text("It is 42."),
    ]);
    let (runner, store) = runner(Arc::clone(&model));

    let events = run_to_end(&runner, spec(&[("maths", "eval_expression")])).await;

    let (answer, reason, iterations) = end(&events);
    assert_eq!(answer, "Let me compute.\nIt is 42.");
    assert_eq!(deltas(&events), answer);
    assert_eq!((reason, iterations), (FinishReason::Stop, 2));
    let thoughts = store
        .all_thoughts(&Tenant::default_tenant(), events[0].message_id)
        .await
        .unwrap();
    assert_eq!(thoughts.len(), 2);
    assert_eq!(thoughts[0].tool_calls[0].observation.as_deref(), Some("42"));
    assert_eq!(thoughts[1].answer, "It is 42.");
    let usage = thoughts[0].usage.clone().unwrap();
    assert_eq!(usage.tokens.total_tokens, 15);
    let second = &model.requests()[1];
    assert_eq!(
        second.messages.len(),
        3,
        "user, assistant calls, tool result"
    );
}

#[tokio::test]
async fn the_last_round_offers_no_tools_and_a_call_there_ends_at_the_limit() {
    let call = || ScriptedTurn::calls("", &[("c", "eval_expression", r#"{"expression": "1"}"#)]);
    let model = ScriptedChatModel::new(vec![call(), call()]);
    let (runner, store) = runner(Arc::clone(&model));
    let mut spec = spec(&[("maths", "eval_expression")]);
    spec.agent.max_iteration = 1;

    let events = run_to_end(&runner, spec).await;

    assert_eq!(end(&events).1, FinishReason::MaxIterations);
    assert_eq!(end(&events).2, 2);
    let requests = model.requests();
    assert!(!requests[0].tools.is_empty());
    assert!(
        requests[1].tools.is_empty(),
        "the last round offers no tools"
    );
    let thoughts = store
        .all_thoughts(&Tenant::default_tenant(), events[0].message_id)
        .await
        .unwrap();
    assert_eq!(thoughts[1].tool_calls.len(), 1, "the last call is recorded");
    assert!(
        thoughts[1].tool_calls[0].observation.is_none(),
        "but not run"
    );
}

#[tokio::test]
async fn an_unknown_tool_is_an_observation_and_the_loop_goes_on() {
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::calls("", &[("w", "web_search", r#"{"q": "x"}"#)]),
        ScriptedTurn::text("No search here."),
    ]);
    let (runner, _) = runner(Arc::clone(&model));

    let events = run_to_end(&runner, spec(&[])).await;

    assert_eq!(
        end(&events),
        ("No search here.".to_owned(), FinishReason::Stop, 2)
    );
    let finished = events.iter().find_map(|e| match &e.event {
        RunEvent::ToolFinished { call, .. } => call.observation.clone(),
        _ => None,
    });
    assert_eq!(
        finished.as_deref(),
        Some("there is not a tool named web_search")
    );
}

#[tokio::test]
async fn a_cancel_between_rounds_stops_before_the_next_model_call() {
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::calls("Waiting.", &[("s", "sleep", r#"{"ms": 60000}"#)]),
        ScriptedTurn::text("never asked"),
    ]);
    let (runner, store) = runner(Arc::clone(&model));
    let handle = runner
        .start(spec(&[("testing", "sleep")]), runner.run_token())
        .await
        .unwrap();
    let mut events = handle.events;
    let mut seen = read_until(&mut events, |e| matches!(e, RunEvent::ToolStarted { .. })).await;

    let status = runner
        .cancel(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap();
    seen.extend(drain(events).await);

    assert_eq!(status, MessageStatus::Cancelled);
    assert_eq!(
        end(&seen),
        ("Waiting.".to_owned(), FinishReason::Cancelled, 1)
    );
    assert_eq!(model.requests().len(), 1);
    let message = store
        .get_message(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.status, MessageStatus::Cancelled);
    assert_eq!(message.answer, "Waiting.");
}

/// What a run was started with is kept with its message, whole: the agent as given, client
/// tools, images, the deadline as a moment, the disconnect rule and the trace parent; a
/// message written without one (an earlier version) reads as having none.
#[tokio::test]
async fn the_whole_run_spec_is_kept_with_the_message() {
    use crate::runner::{ImageSource, InputImage, StoredSpec};
    use crate::telemetry::TraceParent;

    let model = ScriptedChatModel::new(vec![ScriptedTurn::text("Done.")]);
    let (runner, store) = runner(model);
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut asked = spec(&[("maths", "eval_expression")]);
    asked.agent.instruction = "Be {{tone}}.".into();
    asked.agent.model.parameters = serde_json::json!({"temperature": 0.2})
        .as_object()
        .cloned()
        .unwrap();
    asked.inputs.insert("tone".into(), "brief".into());
    asked.files.push(InputImage {
        source: ImageSource::Data {
            mime_type: "image/png".into(),
            bytes: vec![0, 159, 146, 150],
        },
        detail: "high".into(),
    });
    asked.client_tools.push(ClientToolSpec {
        name: "lookup".into(),
        description: "Look it up".into(),
        parameters: serde_json::json!({"type": "object"}),
        require_approval: true,
    });
    asked.deadline = Some(Duration::from_secs(90));
    asked.cancel_on_disconnect = true;
    asked.trace_parent = TraceParent::from_header(traceparent);
    let handle = runner
        .start(asked.clone(), runner.run_token())
        .await
        .unwrap();
    drain(handle.events).await;

    let kept = runner
        .stored_spec(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap()
        .expect("kept with the message");
    let message = store
        .get_message(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap()
        .unwrap();
    let expected = StoredSpec::of(&asked.clone().validated().unwrap(), message.created_at);
    assert_eq!(expected.trace_parent.as_deref(), Some(traceparent));
    assert_eq!(
        kept.deadline,
        Some(message.created_at + chrono::Duration::seconds(90))
    );
    assert_eq!(kept, expected);

    let unknown = crate::domain::MessageId::new();
    assert!(runner
        .stored_spec(&Tenant::default_tenant(), unknown)
        .await
        .unwrap()
        .is_none());
}

/// A round of more calls than `runner.max_tool_calls_per_round` (128) runs the first 128;
/// each call past them gets an observation saying it was not run, and the model goes on.
#[tokio::test]
async fn calls_past_the_round_limit_are_not_run_and_the_model_goes_on() {
    let ids: Vec<String> = (0..130).map(|n| format!("c{n}")).collect();
    let calls: Vec<(&str, &str, &str)> = ids
        .iter()
        .map(|id| (id.as_str(), "eval_expression", r#"{"expression": "1+1"}"#))
        .collect();
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::calls("", &calls),
        ScriptedTurn::text("Done."),
    ]);
    let (runner, store) = runner(Arc::clone(&model));
    let handle = runner
        .start(spec(&[("maths", "eval_expression")]), runner.run_token())
        .await
        .unwrap();
    let events = drain(handle.events).await;
    assert!(matches!(
        &events.last().unwrap().event,
        RunEvent::MessageEnd { .. }
    ));
    let started = events
        .iter()
        .filter(|e| matches!(e.event, RunEvent::ToolStarted { .. }))
        .count();
    assert_eq!(started, 128);
    let thoughts = store
        .all_thoughts(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap();
    let observations: Vec<&str> = thoughts[0]
        .tool_calls
        .iter()
        .map(|c| c.observation.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(observations[127], "2");
    assert_eq!(
        observations[128],
        "not run: more than 128 calls in one round"
    );
    assert_eq!(
        observations[129],
        "not run: more than 128 calls in one round"
    );
    assert_eq!(model.requests().len(), 2, "the model went on");
}

/// A panic inside a run (a bug) still ends it as every run ends: an `error` event of code
/// `internal` (not a store failure), the message FAILED, and the run no longer live.
#[tokio::test]
async fn a_panic_in_a_run_ends_it_as_failed() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Panic("a bug")]);
    let (runner, store) = runner(model);
    let handle = runner.start(spec(&[]), runner.run_token()).await.unwrap();
    let events = drain(handle.events).await;
    match &events.last().unwrap().event {
        RunEvent::Error { failure, .. } => {
            assert_eq!(failure.code, "internal");
            assert_eq!(
                failure.message,
                "the run failed on an internal error of the service"
            );
        }
        other => panic!("the run did not end with an error: {other:?}"),
    }
    let message = store
        .get_message(&Tenant::default_tenant(), handle.message_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.status, MessageStatus::Failed);
    assert_eq!(message.error.unwrap().code, "internal");
    let cancel = runner
        .cancel(&Tenant::default_tenant(), handle.message_id)
        .await;
    assert!(
        matches!(
            cancel,
            Err(crate::runner::RunError::NotRunning {
                status: MessageStatus::Failed,
                ..
            })
        ),
        "no longer running: {cancel:?}"
    );
}

#[tokio::test]
async fn a_client_tool_call_waits_for_the_callers_result_then_goes_on() {
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::calls("", &[("k1", "lookup", r#"{"key": "a"}"#)]),
        ScriptedTurn::text("The value is 7."),
    ]);
    let (runner, store) = runner(Arc::clone(&model));
    let mut spec = spec(&[]);
    spec.client_tools = vec![ClientToolSpec {
        name: "lookup".into(),
        description: "Looks a key up".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"key": {"type": "string"}}}),
        require_approval: false,
    }];
    let handle = runner.start(spec, runner.run_token()).await.unwrap();
    let mut events = handle.events;
    let mut seen = read_until(&mut events, |e| {
        matches!(e, RunEvent::ToolCallsRequired { .. })
    })
    .await;
    let tenant = Tenant::default_tenant();
    let waiting = store
        .get_message(&tenant, handle.message_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.status, MessageStatus::WaitingToolOutputs);

    runner
        .submit_tool_outputs(
            &tenant,
            handle.message_id,
            vec![ClientOutput {
                tool_call_id: "k1".into(),
                output: "7".into(),
                error: String::new(),
            }],
        )
        .await
        .unwrap();
    seen.extend(drain(events).await);

    assert_eq!(
        end(&seen),
        ("The value is 7.".to_owned(), FinishReason::Stop, 2)
    );
    let second = &model.requests()[1];
    let last = second.messages.last().unwrap();
    assert_eq!(
        last,
        &crate::llm::ChatMessage::Tool {
            tool_call_id: "k1".into(),
            content: "7".into()
        }
    );
}

#[tokio::test]
async fn a_refused_key_ends_the_run_at_once_with_an_error_counting_the_call() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Fail(LlmError::Auth {
        status: 401,
        message: "bad key".into(),
    })]);
    let (runner, store) = runner(Arc::clone(&model));

    let events = run_to_end(&runner, spec(&[])).await;

    match &events.last().unwrap().event {
        RunEvent::Error {
            failure,
            iterations,
            ..
        } => {
            assert_eq!(failure.code, "llm_auth_error");
            assert_eq!(*iterations, 1);
        }
        other => panic!("not an error: {other:?}"),
    }
    assert_eq!(model.requests().len(), 1, "a refused key is not retried");
    let message = store
        .get_message(&Tenant::default_tenant(), events[0].message_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.status, MessageStatus::Failed);
}

#[tokio::test]
async fn a_busy_model_is_retried_and_each_retry_is_announced() {
    let busy = || {
        ScriptedTurn::Fail(LlmError::Server {
            status: 503,
            message: "busy".into(),
            retry_after: None,
        })
    };
    let model = ScriptedChatModel::new(vec![busy(), busy(), ScriptedTurn::text("Fine now.")]);
    let (first, _) = runner(Arc::clone(&model));

    let events = run_to_end(&first, spec(&[])).await;

    assert_eq!(
        end(&events),
        ("Fine now.".to_owned(), FinishReason::Stop, 1)
    );
    let retries: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::Retry { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(retries, vec![2, 3]);
    assert_eq!(model.requests().len(), 3);

    let always = ScriptedChatModel::new(vec![busy(), busy(), busy(), busy()]);
    let (exhausted, _) = runner(Arc::clone(&always));
    let events = run_to_end(&exhausted, spec(&[])).await;
    match &events.last().unwrap().event {
        RunEvent::Error { failure, .. } => {
            assert_eq!(failure.code, "llm_server_error");
            assert!(
                failure.message.ends_with("(after 3 attempts)"),
                "{}",
                failure.message
            );
        }
        other => panic!("not an error: {other:?}"),
    }
    assert_eq!(always.requests().len(), 3, "max_retries 2: three attempts");
}

/// Every run's task is spawned, moved and held while it lives; it holds the run and what
/// is under way, not room for the deepest await of its rounds and of its ending (which made
/// it 165 KiB, copied at each move and handed back to the system at each run's end).
#[test]
fn a_runs_task_stays_small() {
    fn returned<A, R>(_: impl FnOnce(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }
    let task = returned(super::RunTask::drive);
    assert!(task <= 16 * 1024, "a run's task takes {task} bytes");
}
