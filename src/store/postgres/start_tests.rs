//! A start in one call, on a real PostgreSQL: what it writes, a lost connection, and the
//! starts that take the way that decides beside it.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::start::StartArgs;
use super::tests::{end_every_session, own_store, Databases};
use crate::domain::{ConversationId, Message};
use crate::store::conformance::{insert, start, tenant};
use crate::store::contract::{Admission, Inserted, NewMessage};
use crate::store::test_records::{conversation, running_message};
use crate::store::ConversationRule;
use crate::store::Store;

/// A start on a connection the server ended a moment before (too recently used for the pool
/// to test it) lands, once, in its place: the call is made again on another connection.
#[tokio::test]
async fn a_start_right_after_the_server_ended_its_connection_lands() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, _) = own_store(&databases, |settings| settings.pool_size = 1).await;
    let opening = conversation(&tenant());
    start(&store, opening.id, Some(&opening)).await;
    end_every_session(&databases).await;
    let second = start(&store, opening.id, None).await;
    end_every_session(&databases).await;
    let third = start(&store, opening.id, None).await;
    assert_eq!((second.seq, third.seq), (2, 3));
    assert!(*store.writable().borrow(), "the store stayed writable");
    let written = store
        .list_messages(&tenant(), opening.id, 0, wide())
        .await
        .unwrap();
    let seqs: Vec<u64> = written.items.iter().map(|message| message.seq).collect();
    assert_eq!(seqs, [1, 2, 3], "each start written once");
}

/// A connection a start gave back serves the next call untested only while it is warm:
/// after a pause, one the server ended meanwhile goes back to the pool, which finds it dead
/// and opens another, so a read (which is not made twice) is answered.
#[tokio::test]
async fn a_connection_given_back_is_tested_once_cold() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, _) = own_store(&databases, |settings| settings.pool_size = 1).await;
    let opening = conversation(&tenant());
    let first = start(&store, opening.id, Some(&opening)).await;
    end_every_session(&databases).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let read = store.get_message(&tenant(), first.id).await.unwrap();
    assert_eq!(read.map(|read| read.id), Some(first.id));
    let next = start(&store, opening.id, None).await;
    assert_eq!(next.seq, 2);
}

/// The call made again after its first try landed (its answer lost with the connection)
/// finds that message and answers its place: nothing is written twice and the idempotency
/// key it took stays its own.
#[tokio::test]
async fn a_start_tried_again_after_it_landed_is_written_once() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, opening, _) = databases.opened().await;
    let mut connection = PgConnection::connect(&databases.url()).await.unwrap();
    let message = running_message(opening.id, 0);
    let first = call(&mut connection, &message, false).await;
    let again = call(&mut connection, &message, true).await;
    assert_eq!(first, ("inserted".to_owned(), Some(2), Some(2)));
    assert_eq!(again, first, "the first try's place");
    let (rows, keys): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM messages WHERE id = $1), \
                (SELECT count(*) FROM idempotency_keys WHERE message_id = $1)",
    )
    .bind(message.id.0)
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!((rows, keys), (1, 1));
    let read: Message = store
        .get_message(&tenant(), message.id)
        .await
        .unwrap()
        .expect("written");
    assert_eq!((read.seq, read.ordinal, read.query), (2, 2, message.query));
    let _ = connection.close().await;
}

/// `agent_runner_start` as the service calls it, for `message` with a fixed idempotency key.
async fn call(
    connection: &mut PgConnection,
    message: &Message,
    again: bool,
) -> (String, Option<i64>, Option<i64>) {
    let mut placeless = message.clone();
    placeless.seq = 0;
    placeless.ordinal = 0;
    let record = serde_json::to_string(&placeless).unwrap();
    let (head, tail) = super::start::cut_at_seq(&record, &placeless).unwrap();
    let args = StartArgs {
        tenant: tenant().as_str().to_owned(),
        id: message.id.0,
        conversation: message.conversation_id.0,
        conversation_record: None,
        head: head.to_owned(),
        tail: tail.to_owned(),
        spec: "{}".to_owned(),
        agent: None,
        parent: None,
        lock: super::start::conversation_lock(&tenant(), message),
        alone: false,
        key: Some("the key".to_owned()),
        fingerprint: Some("its fingerprint".to_owned()),
        limits: None,
        child: false,
        max_running: 0,
        per_minute: 0,
        max_children: 0,
    };
    args.bind(sqlx::query_as(super::start::START), "conformance", again)
        .fetch_one(connection)
        .await
        .unwrap()
}

/// After a message of an earlier version (ordinal 0, unknown), a new one's ordinal stays
/// unknown and its seq follows on.
#[tokio::test]
async fn after_an_unknown_ordinal_the_ordinal_stays_unknown() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, opening, first) = databases.opened().await;
    let mut connection = PgConnection::connect(&databases.url()).await.unwrap();
    sqlx::query("UPDATE messages SET ordinal = 0 WHERE id = $1")
        .bind(first.id.0)
        .execute(&mut connection)
        .await
        .unwrap();
    let _ = connection.close().await;
    let next = start(&store, opening.id, None).await;
    assert_eq!((next.seq, next.ordinal), (2, 0));
    let read = store.get_message(&tenant(), next.id).await.unwrap();
    assert_eq!(read.map(|read| (read.seq, read.ordinal)), Some((2, 0)));
}

/// Starts in one call, with and without a tenant limit, and starts whose rule reads the
/// conversation's live messages (which take the way that decides, and queue), in one
/// conversation at once: every one lands, in consecutive places, none waiting on another
/// for good (every way takes the key, then the tenant's lock, then the conversation's).
#[tokio::test]
async fn starts_in_one_call_and_decided_ones_share_a_conversation() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, _) = own_store(&databases, |settings| settings.pool_size = 4).await;
    let opening = conversation(&tenant());
    start(&store, opening.id, Some(&opening)).await;
    let kinds = [
        Admission::default(),
        Admission {
            max_running: 1_000,
            ..Admission::default()
        },
        Admission {
            rule: ConversationRule::Queue { max_queued: 100 },
            ..Admission::default()
        },
    ];
    let starts: Vec<_> = (0..40)
        .map(|i| {
            let store = store.clone();
            let admission = kinds[i % kinds.len()];
            let started =
                tokio::spawn(async move { keyed_start(&store, opening.id, admission, i).await });
            (admission, started)
        })
        .collect();
    let all = async {
        for (admission, started) in starts {
            let inserted = started.await.unwrap();
            if admission.rule.checks() {
                assert!(matches!(inserted, Inserted::Queued { .. }), "{inserted:?}");
            } else {
                assert_eq!(inserted, Inserted::Yes);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("every start landed");
    let written = store
        .list_messages(&tenant(), opening.id, 0, wide())
        .await
        .unwrap();
    let seqs: Vec<u64> = written.items.iter().map(|message| message.seq).collect();
    assert_eq!(seqs, (1..=41).collect::<Vec<u64>>());
    let mut ordinals: Vec<u64> = written
        .items
        .iter()
        .map(|message| message.ordinal)
        .collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, (1..=41).collect::<Vec<u64>>());
    let again = insert(&store, &tenant(), None, running_message(opening.id, 0)).await;
    assert_eq!(again.seq, 42);
}

/// A start with an idempotency key of its own, under `admission`.
pub(super) async fn keyed_start(
    store: &Store,
    conversation: ConversationId,
    admission: Admission,
    i: usize,
) -> Inserted {
    let mut message = running_message(conversation, 0);
    let key = format!("key {i}");
    let record = crate::domain::IdempotencyRecord {
        message_id: message.id,
        fingerprint: "fp".to_owned(),
    };
    store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: None,
            message: &mut message,
            spec: &serde_json::json!({}),
            idempotency: Some((key.as_str(), &record)),
            admission,
        })
        .await
        .unwrap()
}

pub(super) fn wide() -> crate::store::contract::PageSize {
    crate::store::contract::PageSize {
        limit: 1_000,
        max_bytes: 1 << 24,
    }
}
