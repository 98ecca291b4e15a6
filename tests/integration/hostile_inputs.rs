//! Inputs an attacker or a careless client sends, each held to a bound with a clear status:
//! templates that fill to gigabytes, schemas full of patterns, caller text bound for logs and
//! metric labels.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_runner::pb;
use agent_runner::pb::tool_registry_client::ToolRegistryClient;
use futures::StreamExt as _;
use serde_json::json;
use tonic::Code;

use crate::support::process::spawn_service;
use crate::support::{api_provider, serve_app, thoughts};
use crate::support::{
    end_of, last_error, message, run_request, run_to_end, start, streamed_text, FakeOpenAi, Reply,
    RunRequestExt, ScriptedCall, TestServer, BLOCKING_MODEL, PROVIDER, VISION_MODEL,
};

/// A server URL nothing listens on: the documents' tools are never called.
const NOWHERE: &str = "http://127.0.0.1:9";

/// An instruction its inputs fill past `runner.max_instruction_bytes` is refused naming the
/// field and the limit before the model is called; so is a ReAct template that repeats the
/// instruction past it, or repeats a transcript variable. The same input used once runs.
#[tokio::test]
async fn filled_instructions_and_react_prompts_are_bounded() {
    let (llm, _server, mut client) = start(vec![Reply::text(&["fits"], (1, 1))]).await;
    let value = "v".repeat(500_000);
    let with_input = |instruction: String| {
        let mut request = run_request("hi", &[]);
        request.agent_mut().instruction = instruction;
        request.inputs.insert("v".into(), value.clone());
        request
    };

    let status = client
        .run(with_input("{{v}}".repeat(10)))
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "agent.instruction is 5000000 bytes with its inputs filled in, more than \
         runner.max_instruction_bytes (4194304)"
    );

    let mut react = with_input("Help with {{v}}.".into()).strategy(pb::Strategy::ChainOfThought);
    react.agent_mut().react_prompt = "{{instruction}}\n".repeat(10);
    let status = client.run(react).await.err().unwrap();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "agent.react_prompt renders a prompt of 5000120 bytes, more than \
         runner.max_instruction_bytes (4194304)"
    );

    let mut scratchpads = run_request("hi", &[])
        .strategy(pb::Strategy::ChainOfThought)
        .mode(pb::ModelMode::Completion);
    scratchpads.agent_mut().react_prompt = "{{agent_scratchpad}}{{agent_scratchpad}}".into();
    let status = client.run(scratchpads).await.err().unwrap();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "agent.react_prompt uses {{agent_scratchpad}} 2 times; it may appear once"
    );
    assert!(
        llm.requests().is_empty(),
        "no refused run reached the model"
    );

    let fits = with_input("Help with {{v}}.".into()).model(BLOCKING_MODEL);
    let events = run_to_end(&mut client, fits).await;
    assert_eq!(end_of(&events).answer, "fits");
    assert_eq!(streamed_text(&events), "fits");
    let sent = llm.requests();
    let system = sent[0]["messages"][0]["content"].as_str().unwrap();
    assert_eq!(system.len(), "Help with .".len() + value.len());
}

/// An OpenAPI document whose `operations` all take one shared body schema of `patterns`
/// string properties, property `i` matching `^\w{repeat + i}$`.
fn shared_patterns_doc(operations: usize, patterns: usize, repeat: usize) -> String {
    let properties: serde_json::Map<String, serde_json::Value> = (0..patterns)
        .map(|i| {
            let pattern = format!("^\\w{{{}}}$", repeat + i);
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": pattern}),
            )
        })
        .collect();
    let body = json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Shared"}}}});
    let paths: serde_json::Map<String, serde_json::Value> = (0..operations)
        .map(|i| {
            let operation = json!({"operationId": format!("op_{i}"), "requestBody": body});
            (format!("/op{i}"), json!({ "post": operation }))
        })
        .collect();
    json!({
        "openapi": "3.0.0",
        "paths": paths,
        "components": {"schemas": {"Shared": {"type": "object", "properties": properties}}}
    })
    .to_string()
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Operations sharing one schema inline a copy each: past `runner.max_schema_patterns`
/// (2,000) such a document is refused naming the operation, and below it the copies share
/// one compiled validator, so 100 operations of 20 heavy patterns (≈120 KB compiled each)
/// hold megabytes, not the quarter gigabyte one validator per operation would. Every
/// pattern is still checked on a call.
#[tokio::test]
async fn schema_patterns_are_counted_and_compiled_once() {
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_service(dir.path(), &llm).await;
    let mut tools = ToolRegistryClient::connect(format!("http://{}", service.addr))
        .await
        .unwrap();
    let pid = service.child.id();
    let idle = rss_kib(pid);

    let bomb = shared_patterns_doc(256, 150, 2);
    assert!(bomb.len() < 60_000, "{} bytes", bomb.len());
    let refused = tools
        .create_provider(api_provider("bomb", bomb, NOWHERE))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("provider.source: tool op_")
            && refused.message().ends_with(
                "its argument schema holds 2100 patterns with the schemas before it, more \
                 than runner.max_schema_patterns (2000)"
            ),
        "{}",
        refused.message()
    );

    tools
        .create_provider(api_provider(
            "heavy",
            shared_patterns_doc(100, 20, 1000),
            NOWHERE,
        ))
        .await
        .unwrap();
    let grown_mib = rss_kib(pid).saturating_sub(idle) / 1024;
    assert!(grown_mib < 48, "the service grew by {grown_mib} MiB");

    let checked = tools
        .invoke_tool(pb::InvokeToolRequest {
            provider: "heavy".into(),
            name: "op_7".into(),
            arguments: json!({"p3": "too short"}).to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        checked
            .observation
            .starts_with("tool parameters validation error: p3: "),
        "{}",
        checked.observation
    );
}

/// A gateway's 401 that quotes the key it received, and a tool API that echoes its
/// credentials (as a header value and as basic auth), never show them: the error event,
/// the stored message and the observation say `[redacted]` instead.
#[tokio::test]
async fn secrets_an_upstream_echoes_are_masked() {
    let (llm, server, mut client) = start(vec![Reply::Error {
        status: 401,
        message: "Incorrect API key provided. Received API Key = Bearer test-key",
    }])
    .await;
    let events = run_to_end(&mut client, run_request("hi", &[])).await;
    let error = last_error(&events);
    assert_eq!(
        error.message,
        "the LLM provider refused the credentials (HTTP 401): Incorrect API key provided. \
         Received API Key = Bearer [redacted]"
    );
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert!(!format!("{stored:?}").contains("test-key"));
    drop(llm);

    let echo = axum::Router::new().route(
        "/echo",
        axum::routing::get(|headers: axum::http::HeaderMap| async move {
            let seen: Vec<String> = headers
                .iter()
                .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("")))
                .collect();
            seen.join("\n")
        }),
    );
    let url = serve_app(echo).await;
    let spec = json!({"openapi": "3.0.0", "paths": {"/echo": {"get": {"operationId": "echo"}}}})
        .to_string();
    let mut tools = server.tools().await;
    for (name, credentials, secret) in [
        (
            "keyed",
            vec![("api_key", "tool-key-0123456789")],
            "tool-key-0123456789",
        ),
        (
            "basic",
            vec![("username", "ada"), ("password", "correct-horse")],
            "YWRhOmNvcnJlY3QtaG9yc2U=",
        ),
    ] {
        let mut request = api_provider(name, spec.clone(), &url);
        request.provider.as_mut().unwrap().credentials = credentials
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        tools.create_provider(request).await.unwrap();
        let answer = tools
            .invoke_tool(pb::InvokeToolRequest {
                provider: name.into(),
                name: "echo".into(),
                arguments: "{}".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            answer.observation.contains("[redacted]") && !answer.observation.contains(secret),
            "{}",
            answer.observation
        );
    }
}

/// An LLM server answering 500 with a body of its choosing: `endless` streams text forever
/// (counting what it produced), otherwise the body starts and then never continues.
async fn failing_llm(endless: bool, produced: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let produced = Arc::clone(&produced);
            async move {
                let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
                let body = if endless {
                    axum::body::Body::from_stream(futures::stream::repeat_with(move || {
                        produced.fetch_add(chunk.len(), Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(chunk.clone())
                    }))
                } else {
                    let start = futures::stream::once(async {
                        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from("{\"error\": "))
                    });
                    axum::body::Body::from_stream(start.chain(futures::stream::pending()))
                };
                axum::response::Response::builder()
                    .status(500)
                    .body(body)
                    .unwrap()
            }
        }),
    );
    format!("{}/v1", serve_app(app).await)
}

/// An error answer's body is read up to 64 KiB within the idle clock: an endless one is cut
/// (the server produced little more than that per attempt), a silent one ends the call as
/// `llm_idle_timeout` and is retried like other timeouts, and neither hangs the run.
#[tokio::test]
async fn llm_error_bodies_are_capped_and_clocked() {
    for endless in [true, false] {
        let produced = Arc::new(AtomicUsize::new(0));
        let url = failing_llm(endless, Arc::clone(&produced)).await;
        let server = TestServer::start_edited(&url, |config| {
            let provider = config.providers.get_mut(PROVIDER).unwrap();
            provider.idle_timeout_secs = 1;
            provider.max_retries = 1;
        })
        .await;
        let started = std::time::Instant::now();
        let events = run_to_end(&mut server.agents().await, run_request("hi", &[])).await;
        let error = last_error(&events);
        assert!(started.elapsed() < std::time::Duration::from_secs(6));
        assert!(
            error.message.ends_with("(after 2 attempts)"),
            "{}",
            error.message
        );
        if endless {
            assert_eq!(error.code, "llm_server_error");
            let produced = produced.load(Ordering::SeqCst);
            assert!(produced < 24 << 20, "the server produced {produced} bytes");
        } else {
            assert_eq!(error.code, "llm_idle_timeout");
        }
    }
}

/// Five tool answers of 1.1 MB in one round (with `tool_output_limit_bytes` raised to 2 MiB)
/// would make a 5.5 MB thought: every event, Attach's replay and every ListThoughts page
/// stay under the 4 MiB a default client takes, the observations cut to one length with a
/// marker giving their size, and the run completes. `GetToolCall` reads any one call whole;
/// its id is bounded, and a call the run did not make is NOT_FOUND.
#[tokio::test]
async fn a_round_of_large_observations_fits_every_event_and_page() {
    let answer = axum::Router::new().route(
        "/big",
        axum::routing::get(|| async { "word ".repeat(220_000) }),
    );
    let url = serve_app(answer).await;
    let calls: Vec<ScriptedCall> = ["b1", "b2", "b3", "b4", "b5"]
        .into_iter()
        .map(|id| ScriptedCall::new(id, "big", &["{}"]))
        .collect();
    let llm = FakeOpenAi::start(vec![
        Reply::calls(&[], calls, (1, 1)),
        Reply::text(&["Done."], (1, 1)),
    ])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.tool_output_limit_bytes = 2 << 20;
    })
    .await;
    let spec =
        json!({"openapi": "3.0.0", "paths": {"/big": {"get": {"operationId": "big"}}}}).to_string();
    server
        .tools()
        .await
        .create_provider(api_provider("bulky", spec, &url))
        .await
        .unwrap();

    let mut client = server.agents().await;
    let request = run_request("big", &[("bulky", "big")]).model(VISION_MODEL);
    let events = run_to_end(&mut client, request).await;
    assert_eq!(end_of(&events).answer, "Done.");
    let message_id = events[0].message_id.clone();
    let mut replay = client
        .attach(pb::AttachRequest {
            message_id: message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut replayed = 0;
    while replay.message().await.unwrap().is_some() {
        replayed += 1;
    }
    assert_eq!(replayed, events.len());
    let rounds = thoughts(&mut client, message_id.clone()).await;
    let observation = rounds[0].tool_calls[0].observation.clone();
    assert!(observation.len() < 1_000_000, "{}", observation.len());
    assert!(
        observation
            .ends_with("[cut from 1100000 bytes to fit one message; the stored record is whole]"),
        "{}",
        &observation[observation.len().saturating_sub(120)..]
    );
    let sent = llm.requests();
    let tool_message = sent[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(
        tool_message["content"].as_str().unwrap().len(),
        1_100_000,
        "the model reads the whole answer"
    );

    let read = |tool_call_id: String, position: u32| {
        let (mut client, message_id) = (client.clone(), message_id.clone());
        async move {
            client
                .get_tool_call(pb::GetToolCallRequest {
                    message_id,
                    tool_call_id,
                    position,
                })
                .await
        }
    };
    let whole = read("b3".into(), 0).await.unwrap().into_inner();
    let call = whole.tool_call.expect("the call");
    assert_eq!(call.observation.len(), 1_100_000, "whole");
    assert_eq!(
        (call.id.as_str(), whole.position, whole.cut),
        ("b3", 1, false)
    );
    assert_eq!(whole.thought_id, rounds[0].id);
    for (id, position, code) in [
        (String::new(), 0, tonic::Code::InvalidArgument),
        ("x".repeat(513), 0, tonic::Code::InvalidArgument),
        ("b9".to_owned(), 0, tonic::Code::NotFound),
        ("b1".to_owned(), 2, tonic::Code::NotFound),
    ] {
        let refused = read(id, position).await.unwrap_err();
        assert_eq!(refused.code(), code, "{refused:?}");
        if code == tonic::Code::InvalidArgument {
            assert!(refused.message().starts_with("tool_call_id"), "{refused:?}");
        }
    }
}

/// Streams following runs are capped per tenant (`limits.max_follow_streams`): past it an
/// `Attach` is `RESOURCE_EXHAUSTED` naming the limit, and a stream its client closes gives
/// its place back.
#[tokio::test]
async fn follow_streams_per_tenant_are_capped() {
    let llm = FakeOpenAi::start(vec![Reply::calls(
        &[],
        vec![ScriptedCall::new("k1", "lookup", &[r#"{"id": "A1"}"#])],
        (1, 1),
    )])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_follow_streams = 2;
        config.runner.client_tool_timeout_secs = 60;
    })
    .await;
    let mut client = server.agents().await;
    let mut request = run_request("look it up", &[]);
    request.client_tools.push(pb::ClientTool {
        name: "lookup".into(),
        description: "Looks an order up".into(),
        parameters_schema: None,
        require_approval: false,
    });
    let mut run = client.run(request).await.unwrap().into_inner();
    let first = run.message().await.unwrap().unwrap();
    let attach = || {
        let mut client = client.clone();
        let message_id = first.message_id.clone();
        async move {
            client
                .attach(pb::AttachRequest {
                    message_id,
                    after_seq: 0,
                })
                .await
        }
    };
    let one = attach().await.unwrap();
    let _two = attach().await.unwrap();
    let refused = attach().await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().starts_with("limits.max_follow_streams"),
        "{}",
        refused.message()
    );
    drop(one);
    let mut again = None;
    for _ in 0..50 {
        match attach().await {
            Ok(stream) => {
                again = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    assert!(again.is_some(), "a closed stream gives its place back");
}
