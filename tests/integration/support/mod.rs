//! What every integration test uses: the real server on an ephemeral port, the scripted
//! OpenAI-compatible server, and a builder for run requests.

pub mod conversation;
pub mod fake_anthropic;
pub mod fake_openai;
pub mod hundred;
pub mod orders;
pub mod postgres;
pub mod process;
pub mod replicas;
pub mod request;
pub mod server;
pub mod tls;

pub use fake_openai::{FakeOpenAi, Reply, ScriptedCall};
pub use request::RunRequestExt;
pub use server::*;

use agent_runner::pb::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;

/// Serves `app` on an ephemeral loopback port; returns its base URL (`http://127.0.0.1:port`).
pub async fn serve_app(app: axum::Router) -> String {
    format!("http://{}", serve_at(app).await)
}

/// Serves `app` on an ephemeral port of 127.0.0.1 for the rest of the test; returns where.
pub async fn serve_at(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A `CreateProvider` request for an OpenAPI document whose calls go to `server_url`.
pub fn api_provider(
    name: &str,
    spec: String,
    server_url: &str,
) -> agent_runner::pb::CreateProviderRequest {
    use agent_runner::pb;
    pb::CreateProviderRequest {
        provider: Some(pb::ToolProvider {
            name: name.into(),
            source: Some(pb::ProviderSource {
                source: Some(pb::provider_source::Source::Openapi(pb::OpenApiSource {
                    spec,
                    server_url: server_url.into(),
                })),
            }),
            ..Default::default()
        }),
    }
}

/// A scripted LLM playing `replies`, the real server pointed at it, and a client of the
/// agent service: the setup of most tests.
pub async fn start(replies: Vec<Reply>) -> (FakeOpenAi, TestServer, AgentServiceClient<Channel>) {
    let llm = FakeOpenAi::start(replies).await;
    let server = TestServer::start(&llm.base_url()).await;
    let client = server.agents().await;
    (llm, server, client)
}
