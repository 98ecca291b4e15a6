//! Hostile inputs and unlucky operators: documents that explode, answers without end,
//! servers that never answer, credentials that must not travel, URLs that point inward, a
//! disk that fills up, and clocks that must mean what they say.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use agent_runner::pb;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::get;
use futures::StreamExt as _;
use serde_json::json;
use tokio::net::TcpListener;
use tonic::Code;

use crate::support::{
    api_provider, end_of, last_error, message, read_until_delta, run_request, run_to_end,
    serve_app as serve, start, streamed_text, FakeOpenAi, Reply, ScriptedCall, TestServer,
    PROVIDER,
};

fn one_get(path: &str, operation: &str) -> String {
    json!({"openapi": "3.0.0", "paths": {path: {"get": {"operationId": operation}}}}).to_string()
}

async fn invoke(server: &TestServer, provider: &str, tool: &str) -> pb::InvokeToolResponse {
    server
        .tools()
        .await
        .invoke_tool(pb::InvokeToolRequest {
            provider: provider.into(),
            name: tool.into(),
            arguments: "{}".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// A document whose schemas use each other twice per level (2^24 nodes if inlined
/// naively) is refused at once naming the operation, and one that refers to itself three
/// times over becomes a tool whose recursion is cut.
#[tokio::test]
async fn openapi_expansion_is_bounded() {
    let (_llm, server, _client) = start(vec![]).await;
    let mut schemas = serde_json::Map::new();
    for level in 0..24 {
        let next = format!("#/components/schemas/L{}", level + 1);
        schemas.insert(
            format!("L{level}"),
            json!({"type": "object", "properties": {"x": {"$ref": next}, "y": {"$ref": next}}}),
        );
    }
    schemas.insert("L24".into(), json!({"type": "string"}));
    let bomb = json!({"openapi": "3.0.0", "paths": {"/grow": {"post": {"operationId": "grow",
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}}}}},
        "components": {"schemas": schemas}});
    let started = Instant::now();
    let status = server
        .tools()
        .await
        .create_provider(api_provider("bomb", bomb.to_string(), "http://127.0.0.1:9"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("operation \"POST /grow\""),
        "{}",
        status.message()
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    let recursive = r##"{"openapi": "3.0.0", "paths": {"/n": {"post": {"operationId": "node",
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}}},
        "components": {"schemas": {"Node": {"type": "object", "properties": {
            "a": {"$ref": "#/components/schemas/Node"}, "b": {"$ref": "#/components/schemas/Node"},
            "c": {"$ref": "#/components/schemas/Node"}}}}}}"##;
    let created = server
        .tools()
        .await
        .create_provider(api_provider("tree", recursive.into(), "http://127.0.0.1:9"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.tools.len(), 1);
}

/// An API that answers without end costs the observation's worth of reading: the call
/// returns at once with the first 16 KiB and a marker, not after the tool timeout; a file
/// past the file limit is a `tool invoke error` without reading it all.
#[tokio::test]
async fn endless_tool_answers_are_read_only_as_far_as_needed() {
    fn endless(content_type: &'static str) -> Response {
        let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
        let body = futures::stream::repeat_with(move || Ok::<_, Infallible>(chunk.clone()));
        Response::builder()
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from_stream(body))
            .unwrap()
    }
    let api = serve(
        axum::Router::new()
            .route("/text", get(|| async { endless("text/plain") }))
            .route("/image", get(|| async { endless("image/png") })),
    )
    .await;
    let (_llm, server, _client) = start(vec![]).await;
    let spec = json!({"openapi": "3.0.0", "paths": {
        "/text": {"get": {"operationId": "text"}}, "/image": {"get": {"operationId": "image"}}}});
    server
        .tools()
        .await
        .create_provider(api_provider("flood", spec.to_string(), &api))
        .await
        .unwrap();

    let text = invoke(&server, "flood", "text").await;
    assert!(
        text.observation
            .ends_with("[output truncated: 16384 of more than 16384 bytes shown]"),
        "{}",
        &text.observation[text.observation.len() - 80..]
    );
    assert!(text.meta.unwrap().time_cost < 2.0);
    let image = invoke(&server, "flood", "image").await;
    assert_eq!(
        image.observation,
        "tool invoke error: the tool returned a file larger than 10485760 bytes (runner.tool_file_limit_bytes)"
    );
}

/// A model that writes more than `runner.max_answer_bytes` (64 KiB here) ends the run with
/// `answer_too_large`, keeping what came before the limit; the deltas add up to the stored
/// answer and the message can be read back and attached to.
#[tokio::test]
async fn an_answer_past_the_limit_ends_the_run_and_keeps_what_came_before() {
    let llm = FakeOpenAi::start(vec![Reply::Huge { bytes: 200_000 }]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.max_answer_bytes = 64 * 1024;
    })
    .await;
    let mut client = server.agents().await;

    let events = run_to_end(&mut client, run_request("write a lot", &[])).await;

    let error = last_error(&events);
    assert_eq!(error.code, "answer_too_large");
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert_eq!(stored.status, pb::MessageStatus::Failed as i32);
    assert_eq!(stored.answer.len(), 64 * 1024);
    assert_eq!(streamed_text(&events), stored.answer);
    let replayed = client
        .attach(pb::AttachRequest {
            message_id: events[0].message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let count = replayed.map(|e| e.unwrap()).count().await;
    assert_eq!(count, events.len());
}

/// One 20 MB answer chunk under the default limit (2 MiB) is refused while it arrives:
/// the run ends with `answer_too_large` and every event and the message stay readable by a
/// client with the default 4 MiB receive limit.
#[tokio::test]
async fn a_twenty_megabyte_chunk_never_becomes_an_event() {
    let (_llm, _server, mut client) = start(vec![Reply::Huge { bytes: 20_000_000 }]).await;

    let events = run_to_end(&mut client, run_request("flood me", &[])).await;

    assert_eq!(last_error(&events).code, "answer_too_large");
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert!(stored.answer.len() <= 2 * 1024 * 1024);
}

/// A query larger than `runner.max_query_bytes` is refused before the run, naming the field.
#[tokio::test]
async fn a_query_past_its_limit_is_invalid_argument() {
    let (_llm, _server, mut client) = start(vec![]).await;
    let status = client
        .run(run_request(&"q".repeat(1024 * 1024 + 1), &[]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "query is 1048577 bytes, more than runner.max_query_bytes (1048576)"
    );
}

/// An MCP server that accepts the connection and never answers makes `CreateProvider`
/// fail within the MCP timeout (2 s in the tests' configuration), not hang.
#[tokio::test]
async fn a_silent_mcp_server_fails_creation_within_the_timeout() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let (_llm, server, _client) = start(vec![]).await;
    let started = Instant::now();
    let status = server
        .tools()
        .await
        .create_provider(pb::CreateProviderRequest {
            provider: Some(pb::ToolProvider {
                name: "mute".into(),
                source: Some(pb::ProviderSource {
                    source: Some(pb::provider_source::Source::Mcp(pb::McpSource {
                        url: format!("http://{addr}/mcp"),
                    })),
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(
        status.message().contains("did not connect within 2s"),
        "{}",
        status.message()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// An API key placed in the query string never shows where a client or the model can see
/// it when the API cannot be reached: not in `InvokeTool`'s answer, the run's events, nor
/// the prompt of the next round.
#[tokio::test]
async fn a_credential_in_the_query_string_never_reaches_clients_or_the_model() {
    let (llm, server, mut client) = start(vec![
        Reply::calls(&[], vec![ScriptedCall::new("c", "lookup", &["{}"])], (1, 1)),
        Reply::text(&["It failed."], (1, 1)),
    ])
    .await;
    let mut request = api_provider(
        "secretive",
        one_get("/lookup", "lookup"),
        "http://127.0.0.1:9",
    );
    request.provider.as_mut().unwrap().credentials = [
        ("api_key".to_owned(), "sk-live-TOPSECRET".to_owned()),
        ("api_key_query".to_owned(), "key".to_owned()),
    ]
    .into_iter()
    .collect();
    server.tools().await.create_provider(request).await.unwrap();

    let direct = invoke(&server, "secretive", "lookup").await;
    assert!(
        direct
            .observation
            .starts_with("tool invoke error: request failed (could not connect)"),
        "{}",
        direct.observation
    );
    assert!(
        !direct.observation.contains("TOPSECRET"),
        "{}",
        direct.observation
    );
    let events = run_to_end(
        &mut client,
        run_request("look it up", &[("secretive", "lookup")]),
    )
    .await;
    assert_eq!(end_of(&events).answer, "It failed.");
    assert!(!format!("{events:?}").contains("TOPSECRET"));
    assert!(!llm.requests()[1].to_string().contains("TOPSECRET"));
}

/// Credentials are sealed at rest: after a provider with a key is created and the server
/// stopped, no file of the data directory holds the key; started again, the provider still
/// sends it.
#[tokio::test]
async fn credentials_are_encrypted_at_rest() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keys = std::sync::Arc::clone(&seen);
    let api = serve(axum::Router::new().route(
        "/who",
        get(move |headers: axum::http::HeaderMap| {
            let keys = std::sync::Arc::clone(&keys);
            async move {
                let key = headers
                    .get("x-api-key")
                    .map(|v| v.to_str().unwrap().to_owned());
                keys.lock().unwrap().push(key.unwrap_or_default());
                "you"
            }
        }),
    ))
    .await;
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut request = api_provider("vault", one_get("/who", "who"), &api);
    request.provider.as_mut().unwrap().credentials =
        [("api_key".to_owned(), "sealed-secret-9f3a".to_owned())]
            .into_iter()
            .collect();
    server.tools().await.create_provider(request).await.unwrap();
    assert_eq!(invoke(&server, "vault", "who").await.observation, "you");
    server.stop().await;

    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(18).any(|w| w == b"sealed-secret-9f3a"),
            "{} holds the credential",
            entry.display()
        );
    }
    let again = TestServer::start_in(&llm.base_url(), dir.path()).await;
    assert_eq!(invoke(&again, "vault", "who").await.observation, "you");
    assert_eq!(*seen.lock().unwrap(), vec!["sealed-secret-9f3a"; 2]);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Without an allowance, tool URLs may not point inward: loopback, cloud metadata and
/// non-HTTP schemes are refused at creation naming the field; a name that resolves to
/// loopback is refused when called, without the address; and a redirect from an allowed
/// server to the metadata address is not followed.
#[tokio::test]
async fn tool_traffic_keeps_to_the_outbound_policy() {
    let redirector = serve(axum::Router::new().route(
        "/go",
        get(|| async {
            Response::builder()
                .status(302)
                .header(header::LOCATION, "http://169.254.169.254/latest/meta-data")
                .body(Body::empty())
                .unwrap()
        }),
    ))
    .await;
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.outbound.allow = vec!["localhost".into()];
    })
    .await;
    let mut tools = server.tools().await;
    for (url, reason) in [
        ("http://127.0.0.1:9", "points to 127.0.0.1"),
        ("http://169.254.169.254", "points to 169.254.169.254"),
        ("http://[::1]:80", "points to ::1"),
        ("file:///etc/passwd", "only http and https"),
    ] {
        let status = tools
            .create_provider(api_provider("inward", one_get("/x", "x"), url))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{url}");
        assert!(
            status
                .message()
                .starts_with("provider.source.openapi.server_url ")
                && status.message().contains(reason),
            "{url}: {}",
            status.message()
        );
    }
    let port = redirector.rsplit(':').next().unwrap();
    tools
        .create_provider(api_provider(
            "hop",
            one_get("/go", "go"),
            &format!("http://localhost:{port}"),
        ))
        .await
        .unwrap();
    let hop = invoke(&server, "hop", "go").await;
    assert!(
        hop.observation
            .starts_with("tool invoke error: request failed"),
        "{}",
        hop.observation
    );
    assert!(
        !hop.observation.contains("meta-data"),
        "{}",
        hop.observation
    );

    let strict =
        TestServer::start_edited(&llm.base_url(), |config| config.outbound.allow.clear()).await;
    strict
        .tools()
        .await
        .create_provider(api_provider(
            "named",
            one_get("/go", "go"),
            &format!("http://localhost:{port}"),
        ))
        .await
        .unwrap();
    let named = invoke(&strict, "named", "go").await;
    assert!(
        named.observation.contains("outbound policy refuses"),
        "{}",
        named.observation
    );
    assert!(
        !named.observation.contains("127.0.0.1"),
        "{}",
        named.observation
    );
}

/// The agent service's health, checked to be the whole server's (`""`, what Kubernetes'
/// gRPC probe asks) too.
async fn health(server: &TestServer) -> i32 {
    let channel = server.channel().await;
    let mut statuses = Vec::new();
    for service in ["agentrunner.v1.AgentService", ""] {
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        let request = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        statuses.push(health.check(request).await.unwrap().into_inner().status);
    }
    assert_eq!(
        statuses[0], statuses[1],
        "the whole server's health follows the service's"
    );
    statuses[0]
}

/// When the disk fills up mid-run: the run's stream ends with a non-OK status (its events
/// cannot be stored), its message is FAILED with `store_error` and stays readable, health
/// turns NOT_SERVING and new runs are refused as UNAVAILABLE before any model call; once
/// writes work again, health is SERVING and runs work.
#[tokio::test]
async fn a_store_that_cannot_write_fails_the_run_and_health_until_it_can() {
    let (_llm, server, mut client) = start(vec![
        Reply::Slow {
            text: vec!["one ", "two ", "three ", "four"],
            delay_ms: 100,
        },
        Reply::text(&["Back."], (1, 1)),
    ])
    .await;
    let mut stream = client
        .run(run_request("write", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;
    server.store.fail_writes(true);

    let mut ended = None;
    loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(status) => {
                ended = Some(status);
                break;
            }
        }
    }
    let status = ended.expect("the stream ends with a non-OK status");
    assert_eq!(status.code(), Code::Unavailable);
    let stored = message(&mut client, seen[0].message_id.clone()).await;
    assert_eq!(stored.status, pb::MessageStatus::Failed as i32);
    assert_eq!(stored.error.unwrap().code, "store_error");
    let unhealthy = health(&server).await;
    assert_eq!(
        unhealthy,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );
    let refused = client
        .run(run_request("while full", &[]))
        .await
        .expect_err("no run starts while the store cannot write");
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(
        refused.message().contains("the store cannot write"),
        "{}",
        refused.message()
    );

    server.store.fail_writes(false);
    let mut healthy = unhealthy;
    for _ in 0..50 {
        healthy = health(&server).await;
        if healthy == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        healthy,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let events = run_to_end(&mut client, run_request("again", &[])).await;
    assert_eq!(end_of(&events).answer, "Back.");
}

/// First byte and idle are two clocks: with idle 1 s and first byte 5 s, a model whose
/// answer starts after 2 s completes; one that goes silent mid-answer fails with
/// `llm_idle_timeout` after a second.
#[tokio::test]
async fn first_byte_and_idle_timeouts_are_separate_clocks() {
    let llm = FakeOpenAi::start(vec![
        Reply::Late {
            delay_ms: 2000,
            text: vec!["Worth the wait."],
        },
        Reply::Stall(vec!["Then nothing"]),
    ])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        let provider = config.providers.get_mut(PROVIDER).unwrap();
        provider.first_byte_timeout_secs = 5;
        provider.idle_timeout_secs = 1;
        provider.max_retries = 0;
    })
    .await;
    let mut client = server.agents().await;

    let late = run_to_end(&mut client, run_request("slow start", &[])).await;
    assert_eq!(end_of(&late).answer, "Worth the wait.");
    let started = Instant::now();
    let silent = run_to_end(&mut client, run_request("then silence", &[])).await;
    let error = last_error(&silent);
    assert_eq!(error.code, "llm_idle_timeout");
    assert!(started.elapsed() < Duration::from_secs(4));
}
