//! Checks of who may write a run and how commands reach it.

use super::{conversation, delta, envelope, finish, start, tenant};
use super::{Burst, Fence, Harness, StoreError};
use crate::domain::RunCommand;

/// A burst under a fence that is not the run's (a replica that lost the run) is refused
/// as fenced and writes nothing of itself.
pub async fn a_burst_under_another_fence_writes_nothing(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let ours = store.fence();
    let stale = Fence {
        epoch: ours.epoch + 1,
        ..ours
    };
    let burst = Burst {
        records: Vec::new(),
        events: vec![envelope(&message, 1, delta("late"))],
    };
    let refused = store.commit(&tenant(), &stale, &burst).await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
    assert!(store
        .list_events(&tenant(), message.id, 0)
        .await
        .unwrap()
        .is_empty());
}

/// A command for a running message is kept and taken once, in order with others; none is
/// kept for a message that ended; whether a conversation has a running message is known.
pub async fn commands_reach_running_runs_once(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let running = start(&store, opening.id, Some(&opening)).await;
    assert!(store.running_in(&tenant(), opening.id).await.unwrap());
    for command in [RunCommand::Cancel, RunCommand::Outputs(Vec::new())] {
        let owner = store
            .send_command(&tenant(), running.id, &command)
            .await
            .unwrap();
        assert_eq!(owner, Some(store.fence().owner), "the run's owner is named");
    }
    let taken = store.take_commands().await.unwrap();
    let commands: Vec<_> = taken
        .iter()
        .map(|t| (t.message, t.command.clone()))
        .collect();
    assert_eq!(
        commands,
        [
            (running.id, RunCommand::Cancel),
            (running.id, RunCommand::Outputs(Vec::new()))
        ]
    );
    assert!(
        store.take_commands().await.unwrap().is_empty(),
        "taken once"
    );

    let mut ended = running;
    finish(&store, &mut ended, "done").await;
    assert!(!store.running_in(&tenant(), opening.id).await.unwrap());
    assert_eq!(
        store
            .send_command(&tenant(), ended.id, &RunCommand::Cancel)
            .await
            .unwrap(),
        None
    );
    assert!(store.take_commands().await.unwrap().is_empty());
}
