//! What every integration test uses: the real server on an ephemeral port, the scripted
//! OpenAI-compatible server, and a builder for run requests.

pub mod fake_anthropic;
pub mod fake_openai;
pub mod process;
pub mod request;
pub mod server;
pub mod tls;

pub use fake_openai::{FakeOpenAi, Reply, ScriptedCall};
pub use request::RunRequestExt;
pub use server::*;

use agent_runner::pb::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;

/// A scripted LLM playing `replies`, the real server pointed at it, and a client of the
/// agent service: the setup of most tests.
pub async fn start(replies: Vec<Reply>) -> (FakeOpenAi, TestServer, AgentServiceClient<Channel>) {
    let llm = FakeOpenAi::start(replies).await;
    let server = TestServer::start(&llm.base_url()).await;
    let client = server.agents().await;
    (llm, server, client)
}
