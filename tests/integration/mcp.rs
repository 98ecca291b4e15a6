//! MCP providers against an MCP server this test starts with rmcp's server side.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_runner::pb;
use agent_runner::pb::provider_source::Source;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router, ErrorData};
use serde::Deserialize;
use tonic::Code;

use crate::support::{final_thoughts, first_file, run_request, run_to_end, TestServer};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

#[derive(Clone, Default)]
struct Calculator;

#[derive(Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// First addend.
    a: i64,
    /// Second addend.
    b: i64,
}

#[tool_router(server_handler)]
impl Calculator {
    #[tool(description = "Add two integers", annotations(read_only_hint = true))]
    fn add(
        &self,
        Parameters(AddArgs { a, b }): Parameters<AddArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            (a + b).to_string(),
        )]))
    }

    #[tool(description = "A tool that always fails")]
    fn broken(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the gizmo is broken",
        )]))
    }

    /// Named the way many real servers name tools, which OpenAI's API would refuse.
    #[tool(name = "files.read", description = "Read a file")]
    fn files_read(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "contents of the file",
        )]))
    }

    #[tool(description = "Draw a chart")]
    fn chart(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![
            ContentBlock::text("Here is the chart."),
            ContentBlock::image(BASE64.encode(CHART_PNG), "image/png"),
        ]))
    }
}

/// The image the `chart` tool answers with.
const CHART_PNG: &[u8] = b"\x89PNG\r\n\x1a\nmcp chart";

/// A server whose tools answer with more text than any observation may hold.
#[derive(Clone, Default)]
struct Verbose;

#[tool_router(server_handler)]
impl Verbose {
    #[tool(description = "Answer with a mebibyte of text")]
    fn long(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "x".repeat(1 << 20),
        )]))
    }

    #[tool(description = "Answer with 17 MiB of text")]
    fn flood(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "y".repeat(17 << 20),
        )]))
    }
}

async fn mcp_server() -> SocketAddr {
    serve_mcp(None).await
}

/// The server, refusing requests without `Authorization: Bearer <token>` when `token` is set.
async fn serve_mcp(token: Option<&'static str>) -> SocketAddr {
    serve_handler(Calculator, token).await
}

async fn serve_handler<H>(handler: H, token: Option<&'static str>) -> SocketAddr
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: Request, next: Next| async move {
                    let given = request
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    match token {
                        Some(token) if given.as_deref() != Some(&format!("Bearer {token}")) => {
                            StatusCode::UNAUTHORIZED.into_response()
                        }
                        _ => next.run(request).await,
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

fn mcp_provider(name: &str, url: String) -> pb::CreateProviderRequest {
    pb::CreateProviderRequest {
        provider: Some(pb::ToolProvider {
            name: name.into(),
            source: Some(pb::ProviderSource {
                source: Some(Source::Mcp(pb::McpSource { url })),
            }),
            ..Default::default()
        }),
    }
}

/// An MCP server's tools are listed with their input schemas when the provider is created,
/// an agent calls them through the server, and a tool error is an observation.
#[tokio::test]
async fn mcp_tools_are_listed_and_called_in_a_run() {
    let mcp = mcp_server().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("m1", "add", &["{\"a\": 40, \"b\": 2}"]),
                ScriptedCall::new("m2", "broken", &["{}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["42, and the gizmo is broken."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;

    let created = tools
        .create_provider(mcp_provider("calc", format!("http://{mcp}/mcp")))
        .await
        .unwrap()
        .into_inner();

    assert_eq!(created.kind, pb::ProviderKind::Mcp as i32);
    let names: Vec<&str> = created.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["add", "broken", "chart", "files_read"]);
    // Annotated read-only: a call cut by the loss of its run's owner may be made again.
    let idempotent: Vec<bool> = created.tools.iter().map(|t| t.idempotent).collect();
    assert_eq!(idempotent, [true, false, false, false]);
    let schema = created.tools[0].parameters_schema.as_ref().unwrap();
    assert!(format!("{schema:?}").contains("First addend"));
    let refreshed = tools
        .refresh_provider(pb::RefreshProviderRequest {
            name: "calc".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(refreshed.tools.len(), 4);

    let events = run_to_end(
        &mut server.agents().await,
        run_request("40+2?", &[("calc", "add"), ("calc", "broken")]),
    )
    .await;

    let calls = &final_thoughts(&events)[0].tool_calls;
    assert_eq!(calls[0].observation, "42");
    assert_eq!(calls[0].provider, "calc");
    assert_eq!(
        calls[1].observation,
        "tool invoke error: the gizmo is broken"
    );
}

/// A server that cannot be reached is refused at creation, naming the field.
#[tokio::test]
async fn an_unreachable_mcp_server_is_refused() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let status = server
        .tools()
        .await
        .create_provider(mcp_provider("gone", "http://127.0.0.1:9/mcp".into()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(
        status
            .message()
            .starts_with("provider.source.mcp.url: cannot reach the MCP server"),
        "{}",
        status.message()
    );
}

/// A server's dotted tool name becomes a valid one the model is offered, the server is
/// called under its own name, and an image the tool returns is stored as a file of the
/// message with its `file` event; a direct call gets the image's bytes.
#[tokio::test]
async fn dotted_names_are_mapped_and_images_become_files() {
    let mcp = mcp_server().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("r", "files_read", &["{}"]),
                ScriptedCall::new("c", "chart", &["{}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["Read it and drew it."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;
    let created = tools
        .create_provider(mcp_provider("files", format!("http://{mcp}/mcp")))
        .await
        .unwrap()
        .into_inner();
    let read = created
        .tools
        .iter()
        .find(|t| t.original_name == "files.read")
        .unwrap();
    assert_eq!(read.name, "files_read");

    let mut agents = server.agents().await;
    let events = run_to_end(
        &mut agents,
        run_request(
            "Read and chart",
            &[("files", "files.read"), ("files", "chart")],
        ),
    )
    .await;

    let requests = llm.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, vec!["files_read", "chart"]);
    let thought = &final_thoughts(&events)[0];
    assert_eq!(thought.tool_calls[0].observation, "contents of the file");
    let file = first_file(&events);
    assert_eq!(thought.file_ids, vec![file.id.clone()]);
    assert_eq!(
        thought.tool_calls[1].observation,
        format!(
            "Here is the chart.\n[image: image/png, sent to the user as chart-1.png]\n[file {}: chart-1.png]",
            file.id
        )
    );
    let stored = agents
        .get_file(pb::GetFileRequest {
            file_id: file.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            stored.name.as_str(),
            stored.mime_type.as_str(),
            stored.data.as_slice()
        ),
        ("chart-1.png", "image/png", CHART_PNG)
    );

    let direct = tools
        .invoke_tool(pb::InvokeToolRequest {
            provider: "files".into(),
            name: "chart".into(),
            arguments: "{}".into(),
            parameters: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(direct.files.len(), 1);
    assert_eq!(direct.files[0].content, CHART_PNG);
}

/// A server that wants a bearer token says so in a few words, without transport internals;
/// with the token the provider is created.
#[tokio::test]
async fn a_server_refusing_credentials_is_named_in_plain_words() {
    let mcp = serve_mcp(Some("letmein")).await;
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;

    let refused = tools
        .create_provider(mcp_provider("guarded", format!("http://{mcp}/mcp")))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(
        refused.message(),
        format!(
            "provider.source.mcp.url: the MCP server at http://{mcp} refused: authentication \
             required (check the bearer_token credential)"
        )
    );

    let mut request = mcp_provider("guarded", format!("http://{mcp}/mcp"));
    if let Some(provider) = request.provider.as_mut() {
        provider.credentials = [("bearer_token".to_owned(), "letmein".to_owned())].into();
    }
    let created = tools.create_provider(request).await.unwrap().into_inner();
    assert_eq!(created.tools.len(), 4);
}

fn invoke(provider: &str, name: &str) -> pb::InvokeToolRequest {
    pb::InvokeToolRequest {
        provider: provider.into(),
        name: name.into(),
        arguments: "{}".into(),
        parameters: None,
    }
}

/// What an MCP server answers is bounded in bytes, not only in time: a long text is cut to
/// the observation limit, and an answer past 16 MiB (the most one response may carry) fails
/// the call in plain words instead of being read into memory; the provider keeps working.
#[tokio::test]
async fn oversized_mcp_answers_are_cut_or_refused() {
    let mcp = serve_handler(Verbose, None).await;
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;
    tools
        .create_provider(mcp_provider("verbose", format!("http://{mcp}/mcp")))
        .await
        .unwrap();

    let long = tools
        .invoke_tool(invoke("verbose", "long"))
        .await
        .unwrap()
        .into_inner();
    assert!(long.observation.starts_with("xxxx"));
    assert!(
        long.observation
            .ends_with("\n[output truncated: 16384 of 1048576 bytes shown]"),
        "{}",
        &long.observation[long.observation.len().saturating_sub(80)..]
    );

    let flood = tools
        .invoke_tool(invoke("verbose", "flood"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        flood.observation,
        format!("tool invoke error: the MCP server at http://{mcp} failed to answer the call")
    );
    assert!(!flood.meta.unwrap().error.is_empty());

    let again = tools
        .invoke_tool(invoke("verbose", "long"))
        .await
        .unwrap()
        .into_inner();
    assert!(again.observation.starts_with("xxxx"));
}

/// A server that pages its tool list forever: each page two tools and a new cursor, or, as
/// `looping`, the same cursor again.
#[derive(Clone)]
struct EndlessPages {
    looping: bool,
    served: Arc<AtomicUsize>,
}

impl rmcp::ServerHandler for EndlessPages {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        let page = self.served.fetch_add(1, Ordering::SeqCst);
        let schema: serde_json::Map<String, serde_json::Value> = serde_json::from_value(
            serde_json::json!({"type": "object", "description": "z".repeat(1024)}),
        )
        .unwrap();
        let schema = Arc::new(schema);
        let mut result = rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new(format!("t{page}a"), "a tool", Arc::clone(&schema)),
            rmcp::model::Tool::new(format!("t{page}b"), "a tool", schema),
        ]);
        let next = match (self.looping, request.and_then(|r| r.cursor)) {
            (true, Some(cursor)) => cursor,
            _ => format!("page-{}", page + 1),
        };
        result.next_cursor = Some(next);
        Ok(result)
    }
}

/// A tool list that never ends is refused at once as `FAILED_PRECONDITION`, naming the
/// bound it passed, after a bounded number of pages; a cursor that comes back is a loop.
#[tokio::test]
async fn endless_tool_lists_are_refused_at_a_bound() {
    let llm = FakeOpenAi::start(vec![]).await;
    // A hundred round trips must not run into the step's clock on a busy machine.
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.mcp_timeout_secs = 30;
    })
    .await;
    let mut tools = server.tools().await;
    for (looping, says) in [
        (
            false,
            "lists its tools over more than 100 pages, more than are read",
        ),
        (
            true,
            "lists its tools in a loop (the page cursor \"page-1\" came back)",
        ),
    ] {
        let served = Arc::new(AtomicUsize::new(0));
        let handler = EndlessPages {
            looping,
            served: Arc::clone(&served),
        };
        let addr = serve_handler(handler, None).await;
        let status = tools
            .create_provider(mcp_provider("endless", format!("http://{addr}/mcp")))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            format!("provider.source.mcp.url: the MCP server at http://{addr} {says}")
        );
        assert!(served.load(Ordering::SeqCst) <= 100);
    }
}
