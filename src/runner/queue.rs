//! A queued run (`enqueue`): stored as queued when its conversation has live runs, it waits
//! here, on the replica that holds it, until none is left ahead of it, then starts as a new
//! run would, with their questions and answers in its prompt. While it waits it is a live
//! run like any other: followed, cancelled, handed over and taken over.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::found::Found;
use super::launch::{Launch, Opened};
use super::spec::RunSpec;
use super::{prepare, Runner};
use crate::domain::{
    FinishReason, Message, MessageId, MessageStatus, RunEvent, RunFailure, Tenant,
};
use crate::store::Record;

/// How often a queued run reads again which runs are ahead of it when nothing woke it
/// sooner: a run ahead that ended elsewhere unheard, or a queued one that was cancelled.
const RECHECK_EVERY: Duration = Duration::from_millis(500);

/// A queued run, registered as live here with its stream open.
pub(super) struct Queued {
    /// What it runs, its deadline already counting on `cancel`.
    pub spec: RunSpec,
    /// Its message, queued.
    pub message: Message,
    /// Its token: its caller's cancel, its deadline, shutdown.
    pub cancel: CancellationToken,
    /// Its registration and stream.
    pub opened: Opened,
}

/// How a queued run's wait ended.
enum Turn {
    /// No run is ahead of it any more.
    Now,
    /// Its caller cancelled it (or its deadline passed) before it started.
    Cancelled,
    /// This process stops; `handed_over` when a peer or the next process goes on with it.
    Left { handed_over: bool },
}

/// Waits for the run's turn, then starts it; or ends it, or leaves it queued for the next
/// owner, as its wait ended.
pub(super) async fn wait_then_run(runner: Runner, queued: Queued) {
    let Queued {
        spec,
        mut message,
        cancel,
        mut opened,
    } = queued;
    let turn = wait_turn(&runner, &spec.tenant, &mut message, &cancel, &mut opened).await;
    match turn {
        Turn::Now => start(&runner, spec, message, cancel, opened).await,
        Turn::Cancelled => {
            message.queued_behind = None;
            message.updated_at = crate::domain::now();
            let end = message.end(MessageStatus::Cancelled, FinishReason::Cancelled);
            close(message, end, opened).await;
        }
        Turn::Left { handed_over } => {
            message.handed_over = handed_over;
            message.updated_at = crate::domain::now();
            opened.emitter.record(Record::Message(message));
            opened.emitter.close().await;
        }
    }
}

/// Announces the run's place whenever it changes and waits until no run is ahead of it.
async fn wait_turn(
    runner: &Runner,
    tenant: &Tenant,
    message: &mut Message,
    cancel: &CancellationToken,
    opened: &mut Opened,
) -> Turn {
    let mut announced = None;
    loop {
        let read = runner
            .store
            .live_before(tenant, message.conversation_id, message.seq)
            .await;
        let first = match read {
            Ok(ahead) => {
                let (Some(first), Some(behind)) = (ahead.first(), ahead.last()) else {
                    return Turn::Now;
                };
                let count = u32::try_from(ahead.len()).unwrap_or(u32::MAX);
                if announced != Some((*behind, count)) {
                    announced = Some((*behind, count));
                    announce(message, *behind, count, opened).await;
                }
                Some(*first)
            }
            Err(err) => {
                tracing::warn!(error = %err, "a queued run could not read its place; it reads it again");
                None
            }
        };
        let waited = async {
            match first {
                Some(first) => ended_or_a_while(runner, tenant, first).await,
                None => tokio::time::sleep(RECHECK_EVERY).await,
            }
        };
        tokio::select! {
            biased;
            () = runner.shutdown.cancelled() => return Turn::Left { handed_over: false },
            () = runner.draining.cancelled() => return Turn::Left { handed_over: true },
            () = cancel.cancelled() => return Turn::Cancelled,
            () = waited => {}
        }
    }
}

/// Writes the run's place on its message and sends `queued`, durable before it goes out.
async fn announce(message: &mut Message, behind: MessageId, ahead: u32, opened: &mut Opened) {
    message.queued_behind = Some(behind);
    message.updated_at = crate::domain::now();
    opened.emitter.record(Record::Message(message.clone()));
    opened.emitter.emit(RunEvent::Queued { ahead, behind });
    opened.emitter.settle().await;
}

/// Returns once the run `first` has ended, or after [`RECHECK_EVERY`]: at once when it
/// runs here and ends, on its end's notice when it runs on a peer.
async fn ended_or_a_while(runner: &Runner, tenant: &Tenant, first: MessageId) {
    let ended = async {
        match Found::find(&runner.live, &runner.store, tenant, first).await {
            Ok(Found::Local(run)) => {
                let mut events = run.events.subscribe();
                drop(run);
                // The channel closes once the run has recorded its end and left here.
                while !matches!(
                    events.recv().await,
                    Err(broadcast::error::RecvError::Closed)
                ) {}
            }
            Ok(Found::Remote(_)) => {
                let poll = runner.last_seq_of(tenant, first);
                let mut watch = runner.bus.watch(first, poll).await;
                while let Some(Ok(notice)) = watch.next().await {
                    let ended = notice.events.iter().any(|e| e.event.is_terminal());
                    if ended || notice.events.is_empty() {
                        break;
                    }
                }
            }
            Ok(Found::Ended(_)) => {}
            Err(_) => std::future::pending().await,
        }
    };
    let _ = tokio::time::timeout(RECHECK_EVERY, ended).await;
}

/// Starts the run whose turn came: its agent prepared with the history it now has, its
/// message running, on the stream it was queued on.
async fn start(
    runner: &Runner,
    spec: RunSpec,
    mut message: Message,
    cancel: CancellationToken,
    opened: Opened,
) {
    message.status = MessageStatus::Running;
    message.queued_behind = None;
    message.updated_at = crate::domain::now();
    let prepared = prepare::prepare_resumed(
        &runner.store,
        &runner.models,
        &runner.tools,
        &spec,
        &runner.settings,
        &message,
    )
    .await;
    let agent = match prepared {
        Ok(agent) => agent,
        Err(err) => {
            // What it names went away while it waited (a tool, a model).
            let failure = RunFailure {
                code: "not_startable".to_owned(),
                message: format!("the queued run could not start: {err}"),
            };
            message.status = MessageStatus::Failed;
            message.error = Some(failure.clone());
            let end = RunEvent::Error {
                failure,
                usage: message.usage.clone(),
                iterations: 0,
            };
            return close(message, end, opened).await;
        }
    };
    opened.emitter.record(Record::Message(message.clone()));
    let launch = Launch {
        spec,
        agent,
        message,
        cancel,
        fence: runner.store.fence(),
        resumption: None,
        early: None,
        coming: None,
    };
    runner.spawn_run(launch, opened);
}

/// Writes the message as it ended with its last event, and leaves.
async fn close(message: Message, end: RunEvent, mut opened: Opened) {
    opened.emitter.record(Record::Message(message));
    opened.emitter.emit(end);
    opened.emitter.close().await;
}
