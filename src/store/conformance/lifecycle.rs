//! Checks of a store's life beyond single writes: a store that cannot write says so and
//! hides what it did not make durable; retiring old events keeps each run's end.

use super::{
    commit, conversation, delta, end, ended_then_running, envelope, events_of, reads_back, start,
    tenant,
};
use super::{Burst, Category, Harness};

/// A store that cannot write fails writes as unavailable and says so to whoever follows
/// it; once it can, writes work and it says that too.
pub async fn a_store_that_cannot_write_says_unavailable(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let mut writable = store.writable();
    assert!(*writable.borrow_and_update());

    store.fail_writes(true);
    let burst = Burst {
        records: Vec::new(),
        events: vec![envelope(&message, 1, delta("lost?"))],
    };
    let refused = store
        .commit(&tenant(), &store.fence(), &burst)
        .await
        .expect_err("a store that cannot write refuses");
    assert_eq!(refused.category(), Category::Unavailable);
    assert!(
        !*writable.borrow_and_update(),
        "followers learn it cannot write"
    );
    assert!(
        events_of(&store, message.id).await.is_empty(),
        "readers never see what was not made durable"
    );

    store.fail_writes(false);
    store
        .commit(&tenant(), &store.fence(), &burst)
        .await
        .unwrap();
    assert!(*writable.borrow_and_update());
    let events = events_of(&store, message.id).await;
    assert_eq!(events.len(), 1);
}

/// Retiring the events of messages that ended before a moment leaves each its last event
/// (its end) and nothing else of them changed; running messages and messages that ended
/// later keep every event; a second pass finds nothing left to retire.
pub async fn retired_events_leave_each_end(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let (ended, thought, running) = ended_then_running(&store, "kept whole").await;
    commit(
        &store,
        Vec::new(),
        vec![
            envelope(&running, 1, delta("still ")),
            envelope(&running, 2, delta("going")),
        ],
    )
    .await;
    let long_ago = crate::domain::now() - chrono::Duration::days(1);
    assert_eq!(
        store.retire_events(long_ago, 100).await.unwrap(),
        0,
        "nothing ended then"
    );

    let later = crate::domain::now() + chrono::Duration::seconds(5);
    assert_eq!(store.retire_events(later, 100).await.unwrap(), 1);
    let events = events_of(&store, ended.id).await;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3]);
    assert_eq!(
        events[0].event,
        end("kept whole"),
        "the end, answer and all"
    );
    assert_eq!(events_of(&store, running.id).await.len(), 2);
    reads_back(&store, &ended, thought).await;
    assert_eq!(
        store.retire_events(later, 100).await.unwrap(),
        0,
        "retired once"
    );
}
