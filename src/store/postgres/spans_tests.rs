//! Events stored as spans, on a real PostgreSQL: a commit tried again after a try that
//! landed, rows and spans of one run read together, and spans waiting for every live
//! replica to read them.

use sqlx::{Connection, PgConnection};

use super::spans::Layout;
use super::tests::{own_store, Databases};
use crate::domain::{EventEnvelope, Message};
use crate::store::conformance::{delta, envelope, start, tenant};
use crate::store::contract::{Burst, Record};
use crate::store::test_records::conversation;
use crate::store::Store;

const DAY: u32 = 20_261_130;

fn tokens(message: &Message, seq: u64) -> Record {
    Record::TenantTokens {
        day: DAY,
        tokens: 100,
        once: Some((message.id, seq)),
    }
}

fn events(message: &Message, seqs: std::ops::RangeInclusive<u64>) -> Vec<EventEnvelope> {
    seqs.map(|seq| envelope(message, seq, delta(&format!("{seq} "))))
        .collect()
}

async fn commit(store: &Store, records: Vec<Record>, events: Vec<EventEnvelope>) {
    store
        .commit(&tenant(), &store.fence(), &Burst { records, events })
        .await
        .expect("the burst commits");
}

async fn seqs_after(store: &Store, message: &Message, after: u64) -> Vec<u64> {
    let events = store
        .list_events(&tenant(), message.id, after)
        .await
        .unwrap();
    events.iter().map(|event| event.seq).collect()
}

/// Each stored row of `message`: its first `seq` and its last when it is a span.
async fn rows(url: &str, message: &Message) -> Vec<(i64, Option<i64>)> {
    let mut connection = PgConnection::connect(url).await.unwrap();
    let rows =
        sqlx::query_as("SELECT seq, last_seq FROM events WHERE message_id = $1 ORDER BY seq")
            .bind(message.id.0)
            .fetch_all(&mut connection)
            .await
            .unwrap();
    let _ = connection.close().await;
    rows
}

/// A commit whose answer was lost after it landed is tried again with what the run did
/// since, from one row per event or from spans: every event is stored and read once, in
/// order from any point, and the tokens that come with each event are counted once.
#[tokio::test]
async fn a_commit_tried_again_after_it_landed_writes_each_event_once() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, _) = own_store(&databases, |_| {}).await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;

    // One row per event, as while a replica of an earlier release is live; the answer is
    // lost, so the run tries it again, with more, once spans are on.
    backend.spans.set(false);
    commit(&store, vec![tokens(&message, 2)], events(&message, 1..=3)).await;
    backend
        .spans
        .settled(message.id, &Layout::Rows, &events(&message, 1..=3), true);
    backend.spans.set(true);
    let again = vec![tokens(&message, 2), tokens(&message, 5)];
    commit(&store, again.clone(), events(&message, 1..=6)).await;
    // Lost again after landing: the next try has the same spans, and more.
    backend.spans.settled(
        message.id,
        &Layout::Spans(vec![1, 2, 3]),
        &events(&message, 1..=6),
        true,
    );
    let mut last = again;
    last.push(tokens(&message, 8));
    commit(&store, last, events(&message, 1..=9)).await;
    commit(&store, Vec::new(), events(&message, 10..=12)).await;

    assert_eq!(
        seqs_after(&store, &message, 0).await,
        (1..=12).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs_after(&store, &message, 5).await,
        (6..=12).collect::<Vec<_>>()
    );
    assert_eq!(seqs_after(&store, &message, 10).await, vec![11, 12]);
    assert!(seqs_after(&store, &message, 12).await.is_empty());
    let last = store.last_event(&tenant(), message.id).await.unwrap();
    assert_eq!(last.map(|event| event.seq), Some(12));
    assert_eq!(
        store.tenant_tokens(&tenant(), DAY).await.unwrap(),
        300,
        "the tokens of events 2, 5 and 8, each once"
    );
    let url = databases.url();
    assert_eq!(
        rows(&url, &message).await,
        vec![
            (1, None),
            (2, None),
            (3, None),
            (4, Some(6)),
            (7, Some(9)),
            (10, Some(12))
        ],
        "rows where rows landed, then one span per commit"
    );
}

/// A run's events read back whole from rows and spans, and retired down to its last event
/// when its last span held several.
#[tokio::test]
async fn a_last_span_is_retired_down_to_its_last_event() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, _) = own_store(&databases, |_| {}).await;
    let opening = conversation(&tenant());
    let mut message = start(&store, opening.id, Some(&opening)).await;
    commit(&store, Vec::new(), events(&message, 1..=2)).await;
    let mut last = events(&message, 3..=5);
    last.push(envelope(
        &message,
        6,
        crate::domain::RunEvent::completed("1 2 3 4 5 "),
    ));
    message.status = crate::domain::MessageStatus::Completed;
    commit(&store, vec![Record::Message(message.clone())], last.clone()).await;
    assert_eq!(
        seqs_after(&store, &message, 0).await,
        (1..=6).collect::<Vec<_>>()
    );

    let later = crate::domain::now() + chrono::Duration::seconds(5);
    assert_eq!(store.retire_events(later, 10).await.unwrap(), 1);
    let kept = store.list_events(&tenant(), message.id, 0).await.unwrap();
    assert_eq!(kept, last[3..].to_vec(), "the end alone, as it was written");
    assert_eq!(rows(&databases.url(), &message).await, vec![(6, None)]);
}

/// Spans are written only while every live replica reads them: beside a live replica of an
/// earlier release a commit writes one row per event and the schema's minimum is left as
/// it was; once that replica is gone, spans are written and the minimum is raised, so an
/// earlier release is refused at start instead of misreading them.
#[tokio::test]
async fn spans_wait_for_every_live_replica_to_read_them() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, _) = own_store(&databases, |_| {}).await;
    let url = databases.url();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    // A database an earlier release made, with a replica of it live.
    sqlx::query("UPDATE store_meta SET value = '1' WHERE key = 'min_version'")
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO replicas (id, instance, lease_until, started_at) \
         VALUES ('earlier', gen_random_uuid(), now() + interval '1 hour', now())",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    backend.spans.look(&backend.pool).await.unwrap();
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    commit(&store, Vec::new(), events(&message, 1..=3)).await;
    assert_eq!(
        rows(&url, &message).await,
        vec![(1, None), (2, None), (3, None)]
    );
    assert_eq!(minimum(&mut admin).await, "1");

    sqlx::query(
        "UPDATE replicas SET lease_until = now() - interval '1 second' WHERE id = 'earlier'",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    backend.spans.look(&backend.pool).await.unwrap();
    commit(&store, Vec::new(), events(&message, 4..=6)).await;
    assert_eq!(rows(&url, &message).await[3..], [(4, Some(6))]);
    assert_eq!(minimum(&mut admin).await, "2");
    assert_eq!(seqs_after(&store, &message, 2).await, vec![3, 4, 5, 6]);
    let _ = admin.close().await;
}

/// The schema's recorded minimum version.
async fn minimum(admin: &mut PgConnection) -> String {
    let (value,): (String,) =
        sqlx::query_as("SELECT value FROM store_meta WHERE key = 'min_version'")
            .fetch_one(admin)
            .await
            .unwrap();
    value
}
