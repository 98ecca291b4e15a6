//! What an operator sees from outside: `/metrics` scraped after real runs, with exact
//! counts, and spans received by a real OTLP receiver from the real binary, parented on
//! the caller's `traceparent`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::pb;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as OtlpValue;
use opentelemetry_proto::tonic::trace::v1::{status, Span};
use tokio::net::TcpListener;
use tonic::metadata::MetadataValue;

use crate::support::process::{client, spawn_service_with, wait_for_exit};
use crate::support::{
    end_of, last_error, read_until_delta, run_request, run_to_end, start, Reply,
    RunRequestExt as _, ScriptedCall,
};
use agent_runner::api::convert::json_to_struct;
use serde_json::json;

/// `/metrics` as text.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    response.text().await.unwrap()
}

/// The value of the sample `series` (name and labels exactly as exposed), 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0.0)
}

fn runs(text: &str, status: &str) -> f64 {
    sample(
        text,
        &format!("agent_runner_runs_total{{status=\"{status}\",tenant=\"\"}}"),
    )
}

/// After a completed run with a tool call, a run whose tool fails, a failed run and a
/// cancelled run, `/metrics` moved by exactly those counts: runs by status, LLM calls and
/// their tokens in the GenAI metrics (a failed call with its `error_type`), tool calls by
/// outcome, time to first delta, cost, active runs back to zero, and store flushes seen.
#[tokio::test]
async fn metrics_count_every_run_llm_call_and_tool_call_exactly() {
    let (llm, server, mut client) = start(vec![
        // Run 1: a tool call, then the answer.
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "c1",
                "eval_expression",
                &["{\"expression\": \"2*3\"}"],
            )],
            (100, 10),
        ),
        Reply::text(&["It is 6."], (120, 5)),
        // Run 2: a failing tool, then the answer.
        Reply::calls(&[], vec![ScriptedCall::new("c2", "fail", &["{}"])], (50, 5)),
        Reply::text(&["That failed."], (60, 5)),
        // Run 3: the model rejects the request (not retried).
        Reply::Error {
            status: 400,
            message: "bad request",
        },
        // Run 4: stalls until cancelled.
        Reply::Stall(vec!["Thinking"]),
    ])
    .await;
    let before = scrape(server.metrics_addr).await;
    assert_eq!(runs(&before, "completed"), 0.0);

    let tools = [("maths", "eval_expression"), ("testing", "fail")];
    let first = run_to_end(&mut client, run_request("2*3?", &tools)).await;
    assert_eq!(end_of(&first).answer, "It is 6.");
    let second = run_to_end(&mut client, run_request("fail", &tools)).await;
    assert_eq!(end_of(&second).answer, "That failed.");
    let third = run_to_end(&mut client, run_request("bad", &[])).await;
    assert_eq!(last_error(&third).code, "llm_bad_request");
    let mut stream = client
        .run(run_request("stall", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;
    client
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap();
    while stream.message().await.unwrap().is_some() {}

    let after = scrape(server.metrics_addr).await;
    assert_eq!(runs(&after, "completed"), 2.0);
    assert_eq!(runs(&after, "failed"), 1.0);
    assert_eq!(runs(&after, "cancelled"), 1.0);
    assert_eq!(sample(&after, "agent_runner_runs_active"), 0.0);
    let replica = after
        .lines()
        .find(|line| line.starts_with("agent_runner_replica_info{replica_id=\""))
        .expect("the replica names itself");
    assert!(replica.ends_with("} 1"), "{replica}");
    assert_eq!(
        sample(
            &after,
            "agent_runner_run_duration_seconds_count{status=\"completed\"}"
        ),
        2.0
    );
    let calls = |error: &str| {
        sample(
            &after,
            &format!("gen_ai_client_operation_duration_seconds_count{{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"fc-model\",provider=\"scripted\",error_type=\"{error}\"}}"),
        )
    };
    assert_eq!(calls(""), 4.0, "four answered LLM calls");
    assert_eq!(calls("llm_bad_request"), 1.0);
    assert_eq!(calls("cancelled"), 1.0);
    let tokens = |kind: &str| {
        sample(
            &after,
            &format!("gen_ai_client_token_usage_sum{{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"fc-model\",provider=\"scripted\",gen_ai_token_type=\"{kind}\"}}"),
        )
    };
    // Four calls reported 330 input and 25 output tokens; the cancelled one (which
    // reported none) was counted with the tokenizer, and the rejected one used none.
    assert!(
        tokens("output") > 25.0 && tokens("output") < 30.0,
        "{after}"
    );
    assert!(tokens("input") > 330.0, "{after}");
    let observed = sample(
        &after,
        "gen_ai_client_token_usage_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"fc-model\",provider=\"scripted\",gen_ai_token_type=\"output\"}",
    );
    assert_eq!(observed, 5.0, "once per LLM call that used tokens");
    assert_eq!(
        sample(&after, "agent_runner_tool_calls_total{provider=\"maths\",tool=\"eval_expression\",outcome=\"success\"}"),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            "agent_runner_tool_calls_total{provider=\"testing\",tool=\"fail\",outcome=\"error\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&after, "agent_runner_time_to_first_delta_seconds_count"),
        3.0
    );
    assert!(
        sample(
            &after,
            "agent_runner_cost_total{currency=\"USD\",tenant=\"\"}"
        ) > 0.0
    );
    assert!(sample(&after, "agent_runner_store_flush_duration_seconds_count") > 0.0);
    // Bursts queue for a committer only on PostgreSQL; the embedded store says nothing.
    let waited = sample(&after, "agent_runner_store_commit_wait_seconds_count");
    match crate::support::server::on_postgres() {
        true => assert!(waited > 0.0, "{after}"),
        false => assert_eq!(waited, 0.0, "{after}"),
    }
    assert_eq!(llm.requests().len(), 6);
}

/// Retries are counted by provider and the failure's code.
#[tokio::test]
async fn retries_are_counted() {
    let (_llm, server, mut client) = start(vec![
        Reply::Error {
            status: 503,
            message: "busy",
        },
        Reply::text(&["ok"], (1, 1)),
    ])
    .await;

    run_to_end(&mut client, run_request("hi", &[])).await;

    let text = scrape(server.metrics_addr).await;
    assert_eq!(
        sample(
            &text,
            "agent_runner_llm_retries_total{provider=\"scripted\",code=\"llm_server_error\"}"
        ),
        1.0
    );
}

/// An OTLP trace receiver: the collector's gRPC service, keeping every span it gets.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    /// The string attributes of every resource the spans came with.
    resources: Arc<Mutex<HashMap<String, String>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for kv in resource.resource.iter().flat_map(|r| &r.attributes) {
                if let Some(OtlpValue::StringValue(value)) =
                    kv.value.as_ref().and_then(|v| v.value.clone())
                {
                    self.resources.lock().unwrap().insert(kv.key.clone(), value);
                }
            }
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Receiver {
    async fn start() -> (Self, std::net::SocketAddr) {
        let receiver = Self::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(receiver.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (receiver, addr)
    }

    /// The spans received, once `count` have arrived (waits up to ten seconds).
    async fn spans(&self, count: usize) -> Vec<Span> {
        for _ in 0..200 {
            let spans = self.spans.lock().unwrap().clone();
            if spans.len() >= count {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.spans.lock().unwrap().clone()
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                Some(OtlpValue::StringValue(s)) => s,
                Some(OtlpValue::IntValue(i)) => i.to_string(),
                Some(OtlpValue::BoolValue(b)) => b.to_string(),
                Some(OtlpValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The real binary exports its spans over OTLP/gRPC to a receiver the test runs: one
/// `invoke_agent` span per run, parented on the caller's `traceparent`, with a `chat
/// {model}` span per LLM call and an `execute_tool {tool}` span per tool call beneath it,
/// carrying the GenAI attributes; a failed tool call's span is an error; the LLM request
/// carries the trace onward; and the run's log lines carry the trace id.
/// Label values come from the configuration and registrations, never from callers: runs
/// of made-up model names calling a client tool count under `other` and `client`, and after
/// twenty of them `/metrics` has exactly the series it had after one.
#[tokio::test]
async fn metric_labels_never_grow_with_what_callers_send() {
    let (llm, server, mut client) = start(vec![]).await;
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"]});
    let run = |index: usize| {
        let mut request = run_request("hi", &[])
            .model(&format!("made-up-model-{index}-{}", "x".repeat(200)))
            .max_iteration(1);
        request.client_tools.push(pb::ClientTool {
            name: format!("lookup_{index}"),
            description: "Look something up".into(),
            parameters_schema: Some(json_to_struct(schema.as_object().unwrap())),
            require_approval: false,
        });
        request
    };
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' ').map(|(series, _)| series.to_owned()))
            .collect()
    };
    let mut after_one = Vec::new();
    for index in 0..20 {
        // The model calls the client tool with bad arguments: checked and answered at once.
        let name: &'static str = Box::leak(format!("lookup_{index}").into_boxed_str());
        llm.repeat(Reply::calls(
            &[],
            vec![ScriptedCall::new("c", name, &["{\"id\": 1}"])],
            (1, 1),
        ));
        let events = run_to_end(&mut client, run(index)).await;
        assert!(matches!(
            events.last().and_then(|e| e.event.as_ref()),
            Some(pb::run_event::Event::End(_) | pb::run_event::Event::Error(_))
        ));
        if index == 0 {
            after_one = series(&scrape(server.metrics_addr).await);
        }
    }
    let text = scrape(server.metrics_addr).await;
    assert!(!text.contains("made-up-model"), "{text}");
    assert!(!text.contains("lookup_"), "{text}");
    assert!(text.contains("gen_ai_request_model=\"other\""), "{text}");
    assert!(
        text.contains("provider=\"client\",tool=\"client\""),
        "{text}"
    );
    assert_eq!(series(&text), after_one);
}

/// The spans exported over OTLP follow the GenAI semantic conventions and join the caller's
/// trace from its `traceparent`.
#[tokio::test]
async fn spans_follow_the_genai_conventions_and_the_callers_trace() {
    let (receiver, otlp) = Receiver::start().await;
    let llm = crate::support::FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("c1", "eval_expression", &["{\"expression\": \"2*3\"}"]),
                ScriptedCall::new("c2", "eval_expression", &["{\"expression\": \"((\"}"]),
            ],
            (100, 10),
        ),
        Reply::text(&["It is 6."], (120, 5)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_service_with(
        dir.path(),
        &llm,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
            ("OTEL_SERVICE_NAME", "agent-runner-test".to_owned()),
            ("AGENT_RUNNER_REPLICA_ID", "replica-7".to_owned()),
        ],
    )
    .await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let mut request = tonic::Request::new(run_request("2*3?", &[("maths", "eval_expression")]));
    request.metadata_mut().insert(
        "traceparent",
        MetadataValue::try_from(format!("00-{trace_id}-{caller_span}-01")).unwrap(),
    );
    let mut stream = client(&service)
        .await
        .run(request)
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    assert_eq!(end_of(&events).answer, "It is 6.");

    let spans = receiver.spans(5).await;
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let agent = named("invoke_agent");
    assert_eq!(
        agent.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let agent = agent[0];
    let resource = receiver.resources.lock().unwrap().clone();
    assert_eq!(resource["service.instance.id"], "replica-7");
    assert_eq!(resource["service.name"], "agent-runner-test");
    assert_eq!(hex(&agent.trace_id), trace_id);
    assert_eq!(hex(&agent.parent_span_id), caller_span);
    let attrs = attributes(agent);
    assert_eq!(attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(attrs["gen_ai.conversation.id"], events[0].conversation_id);
    assert_eq!(attrs["message_id"], events[0].message_id);

    let chats = named("chat fc-model");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.parent_span_id, agent.span_id);
        assert_eq!(chat.kind, 3, "client span");
        let attrs = attributes(chat);
        assert_eq!(attrs["gen_ai.operation.name"], "chat");
        assert_eq!(attrs["gen_ai.provider.name"], "openai");
        assert_eq!(attrs["gen_ai.request.model"], "fc-model");
        assert!(
            !attrs.contains_key("gen_ai.input.messages"),
            "prompts are not recorded unless asked for"
        );
    }
    let first = attributes(
        chats
            .iter()
            .find(|c| attributes(c)["gen_ai.usage.input_tokens"] == "100")
            .unwrap(),
    );
    assert_eq!(first["gen_ai.usage.output_tokens"], "10");
    assert_eq!(first["gen_ai.response.finish_reasons"], "tool_calls");

    let tools = named("execute_tool eval_expression");
    assert_eq!(tools.len(), 2);
    let by_id: HashMap<String, &Span> = tools
        .iter()
        .map(|s| (attributes(s)["gen_ai.tool.call.id"].clone(), *s))
        .collect();
    assert_eq!(by_id["c1"].parent_span_id, agent.span_id);
    let ok = attributes(by_id["c1"]);
    assert_eq!(ok["gen_ai.tool.name"], "eval_expression");
    assert_eq!(ok["gen_ai.tool.type"], "extension");
    let failed = by_id["c2"];
    assert_eq!(
        failed.status.as_ref().unwrap().code,
        status::StatusCode::Error as i32
    );

    let propagated = llm.traceparents();
    let sent = propagated[0]
        .as_deref()
        .expect("the LLM request carries traceparent");
    assert!(sent.starts_with(&format!("00-{trace_id}-")), "{sent}");
    let chat_ids: Vec<String> = chats.iter().map(|c| hex(&c.span_id)).collect();
    assert!(
        chat_ids.iter().any(|id| sent.contains(id.as_str())),
        "{sent} {chat_ids:?}"
    );
    let log = service.log_text();
    assert!(
        log.contains(trace_id),
        "log lines carry the trace id: {log}"
    );
}

/// With `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf` the spans go to `{endpoint}/v1/traces`
/// as a protobuf POST, also when `RUST_LOG` keeps the logs quiet; with the GenAI
/// conventions' opt-in the chat span carries the prompt and the completion.
#[tokio::test]
async fn spans_can_go_over_http_protobuf() {
    use axum::body::Bytes;
    use prost::Message as _;

    let received: Arc<Mutex<Vec<Span>>> = Arc::default();
    let sink = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let sink = Arc::clone(&sink);
            async move {
                let request = ExportTraceServiceRequest::decode(body).unwrap();
                let mut spans = sink.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        spans.extend(scope.spans);
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let llm = crate::support::FakeOpenAi::start(vec![Reply::text(&["Hi."], (3, 1))]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_service_with(
        dir.path(),
        &llm,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
            (
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "true".to_owned(),
            ),
            // Quiet logs do not quiet the exported spans.
            ("RUST_LOG", "warn".to_owned()),
        ],
    )
    .await;

    let events = run_to_end(&mut client(&service).await, run_request("hi there", &[])).await;
    assert_eq!(end_of(&events).answer, "Hi.");

    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = received.lock().unwrap().clone();
        if spans.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, vec!["chat fc-model", "invoke_agent"]);
    let chat = spans.iter().find(|s| s.name == "chat fc-model").unwrap();
    let attrs = attributes(chat);
    assert!(
        attrs["gen_ai.input.messages"].contains("hi there"),
        "{attrs:?}"
    );
    assert!(attrs["gen_ai.output.messages"].contains("Hi."), "{attrs:?}");
}

/// SIGTERM exports the spans the service was still holding: the batch is only due in a
/// minute, so what arrives was sent by the shutdown, which then ends the process (status 0).
/// On one worker thread, the tightest case for a shutdown that waits on the runtime's
/// export task.
#[tokio::test]
async fn sigterm_exports_the_spans_still_held_and_exits() {
    let (receiver, otlp) = Receiver::start().await;
    let llm = crate::support::FakeOpenAi::start(vec![Reply::text(&["Hi."], (3, 1))]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = spawn_service_with(
        dir.path(),
        &llm,
        &[
            ("AGENT_RUNNER_WORKER_THREADS", "1".to_owned()),
            ("AGENT_RUNNER_LOG_FORMAT", "json".to_owned()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000".to_owned()),
        ],
    )
    .await;
    let events = run_to_end(&mut client(&service).await, run_request("hi there", &[])).await;
    assert_eq!(end_of(&events).answer, "Hi.");
    assert!(service.log_text().contains(r#""worker_threads":1"#));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        receiver.spans.lock().unwrap().is_empty(),
        "nothing is exported before the batch is due"
    );

    let pid = service.child.id().to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(signalled.success());
    let status = wait_for_exit(&mut service.child, Duration::from_secs(10))
        .await
        .expect("the process exits within 10 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    let mut names: Vec<String> = receiver
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|span| span.name.clone())
        .collect();
    names.sort_unstable();
    assert_eq!(names, vec!["chat fc-model", "invoke_agent"]);
}
