//! A long conversation: one conversation of many turns, one after another, against a model
//! with an 8192-token context window (so history is trimmed to fit). What a turn costs
//! should not grow with the number of earlier turns: measured by the client (from sending
//! `Run` to its `end`, so reading the history counts) and by the service
//! (`end.usage.latency`, from the loop's start).

use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::run_event::Event;
use serde::Serialize;
use tonic::transport::Channel;

use crate::measure::{percentile, sorted};
use crate::processes::{start_mock, start_service_with};

/// How many turns at each end of the conversation are compared.
const ENDS: usize = 10;

/// What the case measured. Times in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LongReport {
    pub case: &'static str,
    pub turns: usize,
    pub errors: usize,
    /// Median latency of the first ten turns, as the client sees it.
    pub first_turns_ms: f64,
    /// Median latency of the last ten turns, as the client sees it.
    pub last_turns_ms: f64,
    /// `last_turns_ms / first_turns_ms`: 1 when cost is flat in conversation length.
    pub ratio: f64,
    /// The same from `end.usage.latency`, which leaves out preparing the run.
    pub service_first_turns_ms: f64,
    pub service_last_turns_ms: f64,
    pub service_ratio: f64,
    /// Turns sent to the model with the last turn (the rest were trimmed).
    pub last_history_turns: u32,
    /// What the first failed turn said, if one failed.
    pub first_error: Option<String>,
}

/// Runs `turns` turns of one conversation from fresh processes.
pub async fn run_long(
    turns: usize,
    service_env: &[(String, String)],
) -> anyhow::Result<LongReport> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let report = measure(turns, &dir, service_env).await;
    let _ = std::fs::remove_dir_all(&dir);
    report
}

async fn measure(
    turns: usize,
    dir: &std::path::Path,
    service_env: &[(String, String)],
) -> anyhow::Result<LongReport> {
    let mock = start_mock(Duration::ZERO, Duration::ZERO).await?;
    let models = "\n[[providers.mock.models]]\nname = \"bench-model\"\ncontext_window = 8192\n";
    let service = start_service_with(dir, mock.addr, service_env, models).await?;
    let channel = Channel::from_shared(format!("http://{}", service.addr))?
        .connect()
        .await?;
    let mut client = AgentServiceClient::new(channel);
    let mut conversation = String::new();
    let mut latencies = Vec::with_capacity(turns);
    let mut service = Vec::with_capacity(turns);
    let mut errors = 0;
    let mut last_history_turns = 0;
    let mut first_error = None;
    for turn in 0..turns {
        match run_turn(&mut client, &conversation, turn).await {
            Ok(done) => {
                conversation = done.conversation_id;
                latencies.push(done.client_ms);
                service.push(done.latency_ms);
                last_history_turns = done.history_turns;
            }
            Err(error) => {
                errors += 1;
                first_error.get_or_insert(format!("turn {turn}: {error}"));
            }
        }
    }
    let ends = |values: &[f64]| {
        (
            median(values.iter().take(ENDS).copied().collect()),
            median(values.iter().rev().take(ENDS).copied().collect()),
        )
    };
    let (first, last) = ends(&latencies);
    let (service_first, service_last) = ends(&service);
    Ok(LongReport {
        case: "long",
        turns,
        errors,
        first_turns_ms: first,
        last_turns_ms: last,
        ratio: last / first,
        service_first_turns_ms: service_first,
        service_last_turns_ms: service_last,
        service_ratio: service_last / service_first,
        last_history_turns,
        first_error,
    })
}

struct Turn {
    conversation_id: String,
    client_ms: f64,
    latency_ms: f64,
    history_turns: u32,
}

async fn run_turn(
    client: &mut AgentServiceClient<Channel>,
    conversation: &str,
    turn: usize,
) -> Result<Turn, String> {
    let request = pb::RunRequest {
        conversation_id: conversation.to_owned(),
        query: format!("Turn {turn}: what comes next in the story?"),
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: "mock".into(),
                name: "bench-model".into(),
                ..Default::default()
            }),
            instruction: "You are a storyteller.".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sent = std::time::Instant::now();
    let mut stream = client
        .run(request)
        .await
        .map_err(|status| status.to_string())?
        .into_inner();
    let mut history_turns = 0;
    let mut ended = None;
    while let Ok(Some(event)) = stream.message().await {
        match event.event {
            Some(Event::Started(started)) => history_turns = started.history_turns,
            Some(Event::End(end)) => {
                ended = Some(Turn {
                    conversation_id: event.conversation_id,
                    client_ms: sent.elapsed().as_secs_f64() * 1000.0,
                    latency_ms: end.usage.map_or(0.0, |u| u.latency * 1000.0),
                    history_turns,
                });
            }
            Some(Event::Error(error)) => return Err(format!("{}: {}", error.code, error.message)),
            _ => {}
        }
    }
    // The stream is read to its close: a stream dropped before its trailers is reset by
    // the client's HTTP/2 library, which closes the connection after 1024 such resets.
    ended.ok_or_else(|| "the stream ended without an end".to_owned())
}

fn median(values: Vec<f64>) -> f64 {
    percentile(&sorted(values), 50.0)
}
