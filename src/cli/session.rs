//! `run`, `chat` and `attach`: follow a run's events to its end. Ctrl-C asks the server to
//! cancel the run and shows the cancelled end; a second Ctrl-C leaves at once.

use anyhow::Context;
use tokio::io::AsyncBufReadExt;

use super::args::{
    AgentArgs, AttachArgs, ChatArgs, ClientArgs, PolicyArg, ReasoningArg, RunArgs, StrategyArg,
    MODEL_ENV,
};
use super::connection::{agents, status_error, Authed};
use super::render::Printer;
use super::Outcome;
use crate::pb;
use crate::pb::agent_service_client::AgentServiceClient;
use crate::pb::run_event::Event;

type Agents = AgentServiceClient<Authed>;

/// SIGINT as a stream: listening from the start, so a Ctrl-C between two waits is not lost.
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn listen() -> anyhow::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("cannot listen for Ctrl-C")?,
        })
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What following runs from the command line needs: Ctrl-C, the client, the printer.
struct Session {
    interrupts: Interrupts,
    client: Agents,
    printer: Printer,
}

impl Session {
    /// Listens for Ctrl-C first, so none is lost, then connects.
    async fn open(client: &ClientArgs, json: bool) -> anyhow::Result<Self> {
        let interrupts = Interrupts::listen()?;
        Ok(Self {
            client: agents(client).await?,
            printer: Printer::new(json),
            interrupts,
        })
    }

    /// Shows the events of the stream the call opened until it ends.
    async fn follow(
        &mut self,
        opened: Result<tonic::Response<tonic::Streaming<pb::RunEvent>>, tonic::Status>,
    ) -> anyhow::Result<Followed> {
        let stream = opened.map_err(status_error)?.into_inner();
        follow(
            &mut self.client,
            stream,
            &mut self.printer,
            &mut self.interrupts,
        )
        .await
    }
}

/// `agent-runner run`.
pub async fn run(client: &ClientArgs, args: RunArgs) -> anyhow::Result<Outcome> {
    let request = run_request(&args.agent, args.query, args.agent.conversation.clone())?;
    let mut session = Session::open(client, args.agent.json).await?;
    let opened = session.client.run(request).await;
    Ok(session.follow(opened).await?.outcome)
}

/// `agent-runner attach`.
pub async fn attach(client: &ClientArgs, args: AttachArgs) -> anyhow::Result<Outcome> {
    let mut session = Session::open(client, args.json).await?;
    let opened = session
        .client
        .attach(pb::AttachRequest {
            message_id: args.message_id,
            after_seq: args.after,
        })
        .await;
    Ok(session.follow(opened).await?.outcome)
}

/// `agent-runner chat`: each line read is a turn of one conversation; an empty input, end
/// of input, `/exit` or Ctrl-C at the prompt ends it. Exits as the last turn ended.
pub async fn chat(client: &ClientArgs, args: ChatArgs) -> anyhow::Result<Outcome> {
    let mut session = Session::open(client, args.agent.json).await?;
    let prompt = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut conversation = args.agent.conversation.clone();
    let mut last = Outcome::Completed;
    loop {
        if prompt {
            eprint!("› ");
        }
        let line = tokio::select! {
            line = lines.next_line() => line.context("cannot read standard input")?,
            () = session.interrupts.next() => None,
        };
        let Some(line) = line else { break };
        let query = line.trim();
        if query.is_empty() {
            continue;
        }
        if query == "/exit" || query == "/quit" {
            break;
        }
        let request = run_request(&args.agent, query.to_owned(), conversation.clone())?;
        let opened = session.client.run(request).await;
        let followed = session.follow(opened).await?;
        conversation = followed.conversation_id.or(conversation);
        last = followed.outcome;
    }
    Ok(last)
}

/// `provider/name` split at its first `/` (a model name may hold more); `flag` names the
/// argument in the error.
fn provider_and_name<'a>(
    value: &'a str,
    flag: &str,
    example: &str,
) -> anyhow::Result<(&'a str, &'a str)> {
    value
        .split_once('/')
        .filter(|(provider, name)| !provider.is_empty() && !name.is_empty())
        .with_context(|| format!("{flag} {value:?} must be provider/name, e.g. {example}"))
}

/// The request for one turn.
fn run_request(
    agent: &AgentArgs,
    query: String,
    conversation: Option<String>,
) -> anyhow::Result<pb::RunRequest> {
    let conversation_id = conversation.unwrap_or_default();
    let mut request = match &agent.agent {
        Some(stored) => stored_run_request(agent, stored, query, conversation_id)?,
        None => inline_run_request(agent, query, conversation_id)?,
    };
    request.conversation_policy = match agent.conversation_policy {
        None => pb::ConversationPolicy::Unspecified,
        Some(PolicyArg::Reject) => pb::ConversationPolicy::Reject,
        Some(PolicyArg::Parallel) => pb::ConversationPolicy::Parallel,
        Some(PolicyArg::Enqueue) => pb::ConversationPolicy::Enqueue,
        Some(PolicyArg::Interrupt) => pb::ConversationPolicy::Interrupt,
        Some(PolicyArg::Rollback) => pb::ConversationPolicy::Rollback,
        Some(PolicyArg::Steer) => pb::ConversationPolicy::Steer,
    }
    .into();
    Ok(request)
}

/// The request for one turn of an inline agent.
fn inline_run_request(
    agent: &AgentArgs,
    query: String,
    conversation_id: String,
) -> anyhow::Result<pb::RunRequest> {
    // The environment's model is a default for inline runs only: it never overrides a
    // stored agent's own.
    let model = agent
        .model
        .clone()
        .or_else(|| std::env::var(MODEL_ENV).ok().filter(|m| !m.is_empty()))
        .with_context(|| format!("--model (or {MODEL_ENV}, or --agent) is required"))?;
    let (provider, name) = provider_and_name(&model, "--model", "openai/gpt-4o-mini")?;
    let tools = agent
        .tools
        .iter()
        .map(|tool| {
            let (provider, name) = provider_and_name(tool, "--tool", "time/current_time")?;
            Ok(pb::AgentTool {
                provider: provider.to_owned(),
                name: name.to_owned(),
                ..Default::default()
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let strategy = match agent.strategy {
        Some(StrategyArg::Fc) => pb::Strategy::FunctionCalling,
        Some(StrategyArg::Cot) => pb::Strategy::ChainOfThought,
        None => pb::Strategy::Unspecified,
    };
    let reasoning = match agent.reasoning {
        None => pb::Reasoning::Unspecified,
        Some(ReasoningArg::Off) => pb::Reasoning::Off,
        Some(ReasoningArg::Stream) => pb::Reasoning::Stream,
        Some(ReasoningArg::Keep) => pb::Reasoning::Keep,
    };
    Ok(pb::RunRequest {
        conversation_id,
        query,
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: provider.to_owned(),
                name: name.to_owned(),
                ..Default::default()
            }),
            strategy: strategy as i32,
            reasoning: reasoning as i32,
            max_iteration: agent.max_iteration.unwrap_or(0),
            instruction: agent.instruction.clone().unwrap_or_default(),
            tools,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A turn of the stored agent `stored` (`ID`, `ID@VERSION`, `ID:ALIAS`); --model,
/// --instruction and --max-iteration become the run's overrides.
fn stored_run_request(
    agent: &AgentArgs,
    stored: &str,
    query: String,
    conversation_id: String,
) -> anyhow::Result<pb::RunRequest> {
    let (agent_id, version, alias) = super::agents::parse_reference(stored)?;
    let model = agent
        .model
        .as_deref()
        .map(|model| {
            let (provider, name) = provider_and_name(model, "--model", "openai/gpt-4o-mini")?;
            anyhow::Ok(pb::ModelRef {
                provider: provider.to_owned(),
                name: name.to_owned(),
            })
        })
        .transpose()?;
    let overrides = pb::RunOverrides {
        model,
        max_iteration: agent.max_iteration.unwrap_or(0),
        additional_instruction: agent.instruction.clone().unwrap_or_default(),
        budget: None,
    };
    Ok(pb::RunRequest {
        conversation_id,
        query,
        agent_ref: Some(pb::AgentRef {
            agent_id,
            version,
            alias,
        }),
        overrides: (overrides != pb::RunOverrides::default()).then_some(overrides),
        ..Default::default()
    })
}

/// What following a run found.
struct Followed {
    outcome: Outcome,
    conversation_id: Option<String>,
}

/// Shows a run's events until its stream ends; Ctrl-C cancels the run (the stream then
/// ends with the cancelled `end`), a second one leaves without waiting.
async fn follow(
    client: &mut Agents,
    mut stream: tonic::Streaming<pb::RunEvent>,
    printer: &mut Printer,
    interrupts: &mut Interrupts,
) -> anyhow::Result<Followed> {
    let mut message_id: Option<String> = None;
    let mut conversation_id = None;
    let mut outcome = None;
    let mut cancelling = false;
    let mut last_seq = 0;
    loop {
        tokio::select! {
            next = stream.message() => {
                let next = match (next, &message_id) {
                    // The server stopped and handed the run over: follow it again from the
                    // last event shown, wherever it now runs.
                    (Err(status), Some(id)) if status.code() == tonic::Code::Unavailable => {
                        printer.note(&format!("{}; following the run again from event {last_seq}…", status.message()));
                        stream = reattach(client, id, last_seq, interrupts).await?;
                        continue;
                    }
                    (next, _) => next.map_err(status_error)?,
                };
                let Some(event) = next else { break };
                message_id.get_or_insert_with(|| event.message_id.clone());
                conversation_id.get_or_insert_with(|| event.conversation_id.clone());
                // An unstored event (seq 0: reasoning shown, not kept) is no place to resume.
                last_seq = last_seq.max(event.seq);
                printer.event(&event)?;
                outcome = outcome_of(&event).or(outcome);
            }
            () = interrupts.next() => {
                let Some(id) = message_id.clone().filter(|_| !cancelling) else {
                    return Ok(Followed { outcome: Outcome::Cancelled, conversation_id });
                };
                cancelling = true;
                printer.note("cancelling… (Ctrl-C again to leave at once)");
                client
                    .cancel(pb::CancelRequest { message_id: id })
                    .await
                    .map_err(status_error)?;
            }
        }
    }
    let outcome = outcome.context("the stream ended before the run did")?;
    Ok(Followed {
        outcome,
        conversation_id,
    })
}

/// How long the CLI tries to follow a handed-over run again before giving up.
const REATTACH_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Attaches to `message_id` after `after_seq` again, every second while the server is
/// unavailable (restarting, or its peer not yet going on with the run), for up to
/// [`REATTACH_FOR`]; Ctrl-C gives up.
async fn reattach(
    client: &mut Agents,
    message_id: &str,
    after_seq: u64,
    interrupts: &mut Interrupts,
) -> anyhow::Result<tonic::Streaming<pb::RunEvent>> {
    let started = tokio::time::Instant::now();
    loop {
        let opened = client
            .attach(pb::AttachRequest {
                message_id: message_id.to_owned(),
                after_seq,
            })
            .await;
        match opened {
            Ok(stream) => return Ok(stream.into_inner()),
            // A call caught by the server's going away fails CANCELLED or UNKNOWN
            // ("transport error") on the client's side, a call to no server UNAVAILABLE:
            // each means ask again. The server never answers Attach with either itself.
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
                ) && started.elapsed() < REATTACH_FOR => {}
            Err(status) => return Err(status_error(status)),
        }
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            () = interrupts.next() => anyhow::bail!("stopped following the run"),
        }
    }
}

/// How the run ended, when `event` is its end.
fn outcome_of(event: &pb::RunEvent) -> Option<Outcome> {
    match &event.event {
        Some(Event::End(end)) if end.finish_reason == pb::FinishReason::Cancelled as i32 => {
            Some(Outcome::Cancelled)
        }
        Some(Event::End(_)) => Some(Outcome::Completed),
        Some(Event::Error(_)) => Some(Outcome::Failed),
        Some(
            Event::Started(_)
            | Event::Queued(_)
            | Event::Steered(_)
            | Event::UserTurn(_)
            | Event::Delta(_)
            | Event::ToolCallDelta(_)
            | Event::ReasoningDelta(_)
            | Event::Thought(_)
            | Event::ToolStarted(_)
            | Event::ToolFinished(_)
            | Event::ToolCallsRequired(_)
            | Event::File(_)
            | Event::Retry(_)
            | Event::RoundRestarted(_)
            | Event::Child(_)
            | Event::ApprovalRequired(_),
        )
        | None => None,
    }
}
