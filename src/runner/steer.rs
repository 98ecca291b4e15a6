//! A steering run (`steer`): its text joins the live run of its conversation instead of
//! starting another. The steer is stored as a queued message aimed at that run
//! (`Message::steers`), so it is durable, survives its replica, and runs on its own as an
//! `enqueue`d run would should that run make no further model call. The live run takes it
//! before its next model call (`run/steering.rs`); the steer then leaves no message.

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::found::Found;
use super::handle::RunHandle;
use super::host::Host;
use super::live::EventStream;
use super::queue;
use super::spec::RunSpec;
use crate::domain::{ConversationPolicy, Message, MessageId, RunCommand, RunEvent, Tenant};

/// The live run a steer joins, and where its caller's stream picks that run up.
#[derive(Debug, Clone, Copy)]
pub(super) struct Aim {
    /// The conversation's oldest live run.
    pub joined: MessageId,
    /// Its last stored event before the steer is written: the run cannot take the steer
    /// before then, so its `user_turn` comes after.
    pub after_seq: u64,
}

/// Where a run of `spec` aims when it steers, read before it is written: `None` when it
/// does not steer or no run is live (it then runs as a run). A run that ends meanwhile
/// leaves the steer queued behind any other live run, to run on its own.
pub(super) async fn aim<R: Host>(runner: &R, spec: &RunSpec, message: &Message) -> Option<Aim> {
    if spec.conversation_policy() != ConversationPolicy::Steer || spec.parent.is_some() {
        return None;
    }
    let parts = runner.parts();
    let tenant = &spec.tenant;
    let live = parts
        .store
        .live_before(tenant, message.conversation_id, u64::MAX)
        .await;
    let joined = match live {
        Ok(live) => *live.first()?,
        Err(err) => {
            tracing::warn!(error = %err, "the live run to steer could not be read; the text waits as an enqueued run");
            return None;
        }
    };
    let after_seq = match parts.store.last_event(tenant, joined).await {
        Ok(last) => last.map_or(0, |event| event.seq),
        Err(err) => {
            tracing::warn!(error = %err, "the live run to steer could not be read; the text waits as an enqueued run");
            return None;
        }
    };
    Some(Aim { joined, after_seq })
}

/// Hands a steer written queued to its wait (deaf to its caller's cancel and deadline: a
/// steer once taken in is never dropped), tells the run it aims at, and returns the
/// caller's stream.
pub(super) async fn start<R: Host>(
    runner: &R,
    spec: RunSpec,
    message: Message,
    aim: Aim,
) -> RunHandle {
    let parts = runner.parts();
    parts.metrics.conversation_busy("steered");
    let tenant = spec.tenant.clone();
    let handle = queue::enqueue(
        runner,
        queue::Enqueued {
            spec,
            message,
            left: None,
            cancel: CancellationToken::new(),
            fence: parts.store.fence(),
            after_seq: 0,
            interrupted: None,
        },
    );
    notify(runner, &tenant, aim.joined).await;
    RunHandle {
        events: follow(runner.clone(), tenant, aim, handle.events),
        ..handle
    }
}

/// Tells the run `joined` that a steer waits for it, wherever it runs. A notice lost costs
/// nothing: the run's next owner reads the store anyway, and a steer never taken runs.
pub(super) async fn notify<R: Host>(runner: &R, tenant: &Tenant, joined: MessageId) {
    let parts = runner.parts();
    match Found::find(parts.live, parts.store, tenant, joined).await {
        Ok(Found::Local(run)) => run.mailbox.steer_waits(),
        Ok(Found::Remote(_)) => {
            if let Err(err) = runner
                .elsewhere()
                .notify(tenant, joined, RunCommand::Steer)
                .await
            {
                tracing::warn!(error = %err, message_id = %joined, "a run held elsewhere could not be told of a steer; it may run on its own");
            }
        }
        Ok(Found::Ended(_)) => {}
        Err(err) => {
            tracing::warn!(error = %err, message_id = %joined, "a run to steer could not be found; the steer may run on its own");
        }
    }
}

/// What the steering caller's stream does next.
enum Stage {
    /// Hands out the steer's first event, `steered`.
    Steered(EventStream),
    /// Follows the joined run, noting whether it took the steer.
    Joined {
        /// The steer's id.
        steer: MessageId,
        own: EventStream,
        joined: EventStream,
        took: bool,
    },
    /// The joined run ended without taking the text: the steer's own run.
    Own(EventStream),
}

/// The steering caller's stream: its `steered` event, then the joined run's events from
/// `aim.after_seq` to its end, then (unless that run took the text) the steer's own run.
/// Pulled by the client, so nothing runs once it is dropped.
pub(super) fn follow<R: Host>(
    runner: R,
    tenant: Tenant,
    aim: Aim,
    own: EventStream,
) -> EventStream {
    // The runner and tenant travel in the state: nothing is cloned per event.
    let start = Some((runner, tenant, Stage::Steered(own)));
    Box::pin(futures::stream::unfold(start, move |state| async move {
        let (runner, tenant, stage) = state?;
        let (item, next_stage) = next(&runner, &tenant, aim, stage).await?;
        Some((item, next_stage.map(|stage| (runner, tenant, stage))))
    }))
}

type Item = Result<crate::domain::EventEnvelope, super::error::RunError>;

async fn next<R: Host>(
    runner: &R,
    tenant: &Tenant,
    aim: Aim,
    mut stage: Stage,
) -> Option<(Item, Option<Stage>)> {
    loop {
        stage = match stage {
            Stage::Steered(mut own) => {
                let first = own.next().await?;
                let steer = match &first {
                    Ok(envelope) => envelope.message_id,
                    Err(_) => return Some((first, None)),
                };
                let joined = match runner.attach(tenant, aim.joined, aim.after_seq).await {
                    Ok(joined) => joined,
                    Err(err) => {
                        tracing::info!(error = %err, %steer, "the steered run could not be followed; the steer's own stream goes on");
                        return Some((first, Some(Stage::Own(own))));
                    }
                };
                let next = Stage::Joined {
                    steer,
                    own,
                    joined,
                    took: false,
                };
                return Some((first, Some(next)));
            }
            Stage::Joined {
                steer,
                mut own,
                mut joined,
                mut took,
            } => match joined.next().await {
                Some(item) => {
                    took |= item.as_ref().is_ok_and(|envelope| {
                        matches!(&envelope.event, RunEvent::UserTurn { steer: taken, .. } if *taken == steer)
                    });
                    let stage = Stage::Joined {
                        steer,
                        own,
                        joined,
                        took,
                    };
                    return Some((item, Some(stage)));
                }
                None if took => {
                    // The steer's own stream ends once its message is removed: the
                    // caller's ends then, so what it lists next holds no steer.
                    while own.next().await.is_some() {}
                    return None;
                }
                None => Stage::Own(own),
            },
            Stage::Own(mut own) => {
                let item = own.next().await?;
                return Some((item, Some(Stage::Own(own))));
            }
        };
    }
}
