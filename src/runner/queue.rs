//! A queued run (`enqueue`): stored as queued when its conversation has live runs, it waits
//! here, on the replica that holds it, until none is left ahead of it, then starts as a new
//! run would, with their questions and answers in its prompt. While it waits it is a live
//! run like any other: followed, cancelled, handed over and taken over.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::found::Found;
use super::handle::RunHandle;
use super::host::Host;
use super::launch::{Launch, Opened};
use super::live::{self, Mailbox};
use super::prepare;
use super::spec::RunSpec;
use crate::domain::{
    FinishReason, Interruption, Message, MessageId, MessageStatus, RunEvent, RunFailure, Tenant,
};
use crate::store::{Admission, Fence, Record, StoreError};

/// How often a queued run reads again which runs are ahead of it when nothing woke it
/// sooner: a run ahead that ended unheard, or one between the first and the last ahead of
/// it that was cancelled.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// A queued run to hand to its wait: written queued, or taken over while queued.
pub(super) struct Enqueued {
    /// What it runs.
    pub spec: RunSpec,
    /// Its message, queued.
    pub message: Message,
    /// What is left of its caller's deadline, counting from now while it waits and then
    /// while it runs.
    pub left: Option<Duration>,
    /// Its token.
    pub cancel: CancellationToken,
    /// The fence its writes go under.
    pub fence: Fence,
    /// Its last stored event (0 for a new one).
    pub after_seq: u64,
    /// A newer run stopped it while it had no owner: it ends so, unstarted.
    pub interrupted: Option<Interruption>,
}

/// Hands a run just written queued to its wait, and stops the live runs ahead of it when
/// its policy says so (`interrupt`, `rollback`); returns its handle. `left` is what is left
/// of its caller's deadline.
pub(super) async fn hold<R: Host>(
    runner: &R,
    spec: RunSpec,
    message: Message,
    cancel: CancellationToken,
    left: Option<Duration>,
) -> RunHandle {
    let parts = runner.parts();
    let stops = spec.conversation_policy().stops_live(message.id);
    if stops.is_none() {
        parts.metrics.conversation_busy("queued");
    }
    let (tenant, queued) = (spec.tenant.clone(), message.clone());
    let enqueued = Enqueued {
        spec,
        message,
        left,
        cancel,
        fence: parts.store.fence(),
        after_seq: 0,
        interrupted: None,
    };
    let handle = enqueue(runner, enqueued);
    if let Some(interruption) = stops {
        super::interrupt::stop_ahead(runner, &tenant, &queued, interruption).await;
    }
    handle
}

/// Registers a queued run as live on `runner` and hands it to its wait; returns its handle,
/// following its events from the first.
pub(super) fn enqueue<R: Host>(runner: &R, enqueued: Enqueued) -> RunHandle {
    let parts = runner.parts();
    let Enqueued {
        mut spec,
        message,
        left,
        cancel,
        fence,
        after_seq,
        interrupted,
    } = enqueued;
    spec.deadline = None;
    if let Some(left) = left {
        parts
            .tracker
            .spawn(super::launch::cancel_after(cancel.clone(), left));
    }
    let (message_id, conversation_id) = (message.id, message.conversation_id);
    let tenant = spec.tenant.clone();
    let mailbox = Mailbox::default();
    if let Some(interruption) = interrupted {
        mailbox.interrupt(interruption);
        cancel.cancel();
    }
    let (opened, first_follower) = runner.open_live(
        &tenant,
        &message,
        fence.clone(),
        &cancel,
        mailbox,
        after_seq,
    );
    let queued = Queued {
        spec,
        message,
        cancel,
        fence,
        opened,
    };
    parts
        .tracker
        .spawn(wait_then_run(runner.clone(), queued).in_current_span());
    RunHandle {
        message_id,
        conversation_id,
        events: live::follow(
            parts.store.clone(),
            tenant,
            message_id,
            after_seq,
            Some(first_follower),
            crate::cluster::Watch::never(),
            live::Known::FromFirstEvent,
        ),
    }
}

/// A queued run, registered as live here with its stream open.
struct Queued {
    /// What it runs, its deadline already counting on `cancel`.
    spec: RunSpec,
    /// Its message, queued.
    message: Message,
    /// Its token: its caller's cancel, its deadline, shutdown.
    cancel: CancellationToken,
    /// The fence it is held under: it starts only while that is still its owner's.
    fence: Fence,
    /// Its registration and stream.
    opened: Opened,
}

/// How a queued run's wait ended.
enum Turn {
    /// No run is ahead of it any more.
    Now,
    /// Its caller cancelled it (or its deadline passed) before it started.
    Cancelled,
    /// This process stops; `handed_over` when a peer or the next process goes on with it.
    Left { handed_over: bool },
    /// A peer adopted it (this replica's lease lapsed while it waited): it is not started
    /// here, and nothing more is written of it.
    Lost,
    /// A steer the run it aimed at took: it leaves no message.
    Joined(MessageId),
}

/// Waits for the run's turn, then starts it; or ends it, or leaves it queued for the next
/// owner, as its wait ended.
async fn wait_then_run<R: Host>(runner: R, queued: Queued) {
    let Queued {
        spec,
        mut message,
        cancel,
        fence,
        mut opened,
    } = queued;
    let admission = super::quota::admission(spec.limits, false);
    let place = Place {
        tenant: &spec.tenant,
        fence: &fence,
        admission,
    };
    // A new steer's first event names the run it aims at.
    if let (Some(joined), 1) = (message.steers, opened.emitter.next_seq()) {
        opened.emitter.emit(RunEvent::Steered {
            joined,
            steer: message.id,
        });
        opened.emitter.settle().await;
    }
    let turn = wait_turn(&runner, &place, &mut message, &cancel, &mut opened).await;
    match turn {
        Turn::Now => start(&runner, spec, message, cancel, opened).await,
        Turn::Cancelled => {
            message.queued_behind = None;
            message.updated_at = crate::domain::now();
            // A newer run that stops the live ones ends a queued one too, unstarted.
            let end = match opened.mailbox.interruption() {
                Some(interruption) => message.end_interrupted(interruption),
                None => message.end(MessageStatus::Cancelled, FinishReason::Cancelled),
            };
            close(message, end, opened).await;
        }
        Turn::Joined(joined) => {
            // Removed before its stream ends: a caller whose stream ended lists no steer.
            opened.emitter.settle().await;
            let dropped = runner
                .parts()
                .store
                .drop_steer(&spec.tenant, message.id, joined, &fence)
                .await;
            if let Err(err) = dropped {
                tracing::warn!(error = %err, message_id = %message.id, "a steer its run took could not be removed; its next owner removes it");
            }
            opened.emitter.close().await;
        }
        Turn::Lost => {
            tracing::warn!(message_id = %message.id, "a queued run was adopted by another replica while this one was away; this one writes nothing more of it");
            opened.emitter.close().await;
        }
        Turn::Left { handed_over } => {
            message.handed_over = handed_over;
            message.updated_at = crate::domain::now();
            opened.emitter.record(Record::Message(message));
            opened.emitter.close().await;
        }
    }
}

/// Whose queued run it is, under which fence, and the tenant limits it starts under.
struct Place<'a> {
    tenant: &'a Tenant,
    fence: &'a Fence,
    admission: Admission,
}

/// Announces the run's place whenever it changes and waits until no run is ahead of it
/// and its tenant's limits admit it.
async fn wait_turn<R: Host>(
    runner: &R,
    place: &Place<'_>,
    message: &mut Message,
    cancel: &CancellationToken,
    opened: &mut Opened,
) -> Turn {
    let tenant = place.tenant;
    let mut announced = None;
    // A steer aims at a run until that run ends: then it either took it or not.
    let mut aiming = message.steers;
    loop {
        let read = runner
            .parts()
            .store
            .live_before(tenant, message.conversation_id, message.seq)
            .await;
        let watched = match read {
            Ok(ahead) => {
                if let Some(joined) = aiming.filter(|joined| !ahead.contains(joined)) {
                    match took_steer(runner, tenant, joined, message.id).await {
                        Ok(true) => return Turn::Joined(joined),
                        Ok(false) => aiming = None,
                        Err(err) => {
                            tracing::warn!(error = %err, "whether a steer was taken could not be read; it reads again");
                            match pause(runner, cancel).await {
                                Some(turn) => return turn,
                                None => continue,
                            }
                        }
                    }
                }
                let (Some(first), Some(behind)) = (ahead.first(), ahead.last()) else {
                    match admitted(runner, place, message.id).await {
                        Admitted::Yes => return Turn::Now,
                        Admitted::Lost => return Turn::Lost,
                        Admitted::NotYet => {}
                    }
                    // Its tenant has no slot free: it waits at the head of its queue.
                    match pause(runner, cancel).await {
                        Some(turn) => return turn,
                        None => continue,
                    }
                };
                let count = u32::try_from(ahead.len()).unwrap_or(u32::MAX);
                // A steer still aiming is followed through the run it aims at.
                if aiming.is_none() && announced != Some((*behind, count)) {
                    announced = Some((*behind, count));
                    announce(message, *behind, count, opened).await;
                }
                // The first ahead ending may make it the run's turn; the one directly ahead
                // ending (cancelled while queued) changes its place.
                let mut watched = vec![*first];
                if behind != first {
                    watched.push(*behind);
                }
                watched
            }
            Err(err) => {
                tracing::warn!(error = %err, "a queued run could not read its place; it reads it again");
                Vec::new()
            }
        };
        let waited = async {
            let ends = watched
                .iter()
                .map(|id| Box::pin(ended(runner, tenant, *id)));
            let any = async {
                if watched.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(ends).await;
            };
            let _ = tokio::time::timeout(RECHECK_EVERY, any).await;
        };
        tokio::select! {
            biased;
            () = runner.parts().shutdown.cancelled() => return Turn::Left { handed_over: false },
            () = runner.parts().draining.cancelled() => return Turn::Left { handed_over: true },
            () = cancel.cancelled() => return Turn::Cancelled,
            () = waited => {}
        }
    }
}

/// Waits a recheck's time; `Some` when the wait ends the run's turn instead.
async fn pause<R: Host>(runner: &R, cancel: &CancellationToken) -> Option<Turn> {
    let parts = runner.parts();
    tokio::select! {
        biased;
        () = parts.shutdown.cancelled() => Some(Turn::Left { handed_over: false }),
        () = parts.draining.cancelled() => Some(Turn::Left { handed_over: true }),
        () = cancel.cancelled() => Some(Turn::Cancelled),
        () = tokio::time::sleep(RECHECK_EVERY) => None,
    }
}

/// Whether a queued run at the head of its queue starts now.
enum Admitted {
    /// Its tenant's limits admit it: it holds a slot and counts as a start.
    Yes,
    /// Not yet: its tenant is at a limit, or the store did not answer.
    NotYet,
    /// It is no longer this replica's.
    Lost,
}

/// Whether the tenant's limits admit the queued run now, under its fence.
async fn admitted<R: Host>(runner: &R, place: &Place<'_>, message: MessageId) -> Admitted {
    match runner
        .parts()
        .store
        .start_queued(place.tenant, message, place.fence, place.admission)
        .await
    {
        Ok(None) => Admitted::Yes,
        Ok(Some(refusal)) => {
            tracing::debug!(?refusal, "a queued run waits for its tenant's limits");
            Admitted::NotYet
        }
        Err(StoreError::Fenced) => Admitted::Lost,
        Err(err) => {
            tracing::warn!(error = %err, "a queued run could not be admitted; it asks again");
            Admitted::NotYet
        }
    }
}

/// Whether the run `joined`, ended, took the steer `steer`: its thoughts, final once it
/// ended, say so.
async fn took_steer<R: Host>(
    runner: &R,
    tenant: &Tenant,
    joined: MessageId,
    steer: MessageId,
) -> Result<bool, StoreError> {
    let thoughts = runner.parts().store.all_thoughts(tenant, joined).await?;
    Ok(thoughts
        .iter()
        .any(|thought| thought.steered.iter().any(|s| s.message_id == steer)))
}

/// Writes the run's place on its message and sends `queued`, durable before it goes out.
async fn announce(message: &mut Message, behind: MessageId, ahead: u32, opened: &mut Opened) {
    message.queued_behind = Some(behind);
    message.updated_at = crate::domain::now();
    opened.emitter.record(Record::Message(message.clone()));
    opened.emitter.emit(RunEvent::Queued { ahead, behind });
    opened.emitter.settle().await;
}

/// Returns once the run `id` has ended: at once when it runs here and ends, on its end's
/// notice when it runs on a peer, at once when it has ended already; never when it cannot
/// be read (the caller's recheck reads again).
async fn ended<R: Host>(runner: &R, tenant: &Tenant, id: MessageId) {
    let parts = runner.parts();
    match Found::find(parts.live, parts.store, tenant, id).await {
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
            let poll = runner.last_seq_of(tenant, id);
            let mut watch = parts.bus.watch(id, poll).await;
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
}

/// Starts the run whose turn came: its agent prepared with the history it now has, its
/// message running, on the stream it was queued on.
async fn start<R: Host>(
    runner: &R,
    spec: RunSpec,
    mut message: Message,
    cancel: CancellationToken,
    opened: Opened,
) {
    let parts = runner.parts();
    message.status = MessageStatus::Running;
    message.queued_behind = None;
    message.updated_at = crate::domain::now();
    let prepared = prepare::prepare_resumed(
        parts.store,
        parts.models,
        parts.tools,
        &spec,
        parts.settings,
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
                usage: Box::new(message.usage.clone()),
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
        fence: parts.store.fence(),
        resumption: None,
        early: None,
        coming: None,
        interrupted: None,
    };
    runner.spawn_run(launch, opened);
}

/// Writes the message as it ended with its last event, and leaves.
async fn close(message: Message, end: RunEvent, mut opened: Opened) {
    opened.emitter.record(Record::Message(message));
    opened.emitter.emit(end);
    opened.emitter.close().await;
}
