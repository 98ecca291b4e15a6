//! `agent-runner-mock-llm`: the scripted OpenAI-compatible server as a program, for
//! benchmarks and for trying the service without a real model.

use std::net::SocketAddr;
use std::time::Duration;

use agent_runner::mock_llm::{self, MockSettings};
use clap::Parser;

/// A scripted OpenAI-compatible Chat Completions server.
#[derive(Debug, Parser)]
#[command(name = "agent-runner-mock-llm", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8088")]
    listen: SocketAddr,
    /// Tool rounds before the answer (only while the request offers tools).
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Tool calls per round.
    #[arg(long, default_value_t = 1)]
    parallel_tools: u32,
    /// Tool the calls name.
    #[arg(long, default_value = "current_time")]
    tool: String,
    /// Arguments of each call (JSON).
    #[arg(long, default_value = r#"{"timezone": "UTC"}"#)]
    arguments: String,
    /// Pieces each call's arguments are streamed in.
    #[arg(long, default_value_t = 2)]
    argument_pieces: u32,
    /// Reasoning streamed as `reasoning_content` before each turn, a word a piece.
    #[arg(long, default_value = "")]
    reasoning: String,
    /// Chunks of the final answer.
    #[arg(long, default_value_t = 20)]
    answer_chunks: u32,
    /// Bytes of each answer chunk (0: a short word).
    #[arg(long, default_value_t = 0)]
    chunk_bytes: usize,
    /// Milliseconds before the first chunk.
    #[arg(long, default_value_t = 0)]
    ttft_ms: u64,
    /// Milliseconds before each later chunk.
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let settings = MockSettings {
        rounds: args.rounds,
        parallel_tools: args.parallel_tools,
        tool: args.tool,
        arguments: args.arguments,
        argument_pieces: args.argument_pieces,
        reasoning: args.reasoning,
        answer_chunks: args.answer_chunks,
        chunk_bytes: args.chunk_bytes,
        time_to_first_token: Duration::from_millis(args.ttft_ms),
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("mock LLM on http://{}/v1", listener.local_addr()?);
    mock_llm::serve(listener, settings).await?;
    Ok(())
}
