//! MCP providers against an MCP server this test starts with rmcp's server side.

use std::net::SocketAddr;

use agent_runner::pb;
use agent_runner::pb::provider_source::Source;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router, ErrorData};
use serde::Deserialize;
use tonic::Code;

use crate::support::{final_thoughts, run_request, run_to_end, TestServer};
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
    #[tool(description = "Add two integers")]
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
}

async fn mcp_server() -> SocketAddr {
    let service = StreamableHttpService::new(
        || Ok(Calculator),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
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
    assert_eq!(names, vec!["add", "broken"]);
    let schema = created.tools[0].parameters_schema.as_ref().unwrap();
    assert!(format!("{schema:?}").contains("First addend"));
    let refreshed = tools
        .refresh_provider(pb::RefreshProviderRequest {
            name: "calc".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(refreshed.tools.len(), 2);

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
