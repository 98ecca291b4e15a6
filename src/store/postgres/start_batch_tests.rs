//! Starts written together, on a real PostgreSQL: one batch that mixes what a start may
//! meet, starts of many runs sharing transactions, a batch tried again after it landed,
//! and two replicas batching starts in the same conversations at once.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::start::StartArgs;
use super::start_batch::Columns;
use super::start_tests::{keyed_start, wide};
use super::tests::{own_store, peer_store, Databases};
use crate::domain::{IdempotencyRecord, Message};
use crate::store::conformance::{start, tenant};
use crate::store::contract::{Admission, Inserted, NewMessage};
use crate::store::test_records::{conversation, running_message};
use crate::store::ConversationRule;

/// The arguments of a start of `message` under `admission`, with `key` if any.
fn args_of(message: &Message, admission: Admission, key: Option<&str>) -> StartArgs {
    let mut message = message.clone();
    message.seq = 0;
    message.ordinal = 0;
    let record = IdempotencyRecord {
        message_id: message.id,
        fingerprint: "its fingerprint".to_owned(),
    };
    let spec = serde_json::json!({});
    let new = NewMessage {
        tenant: &tenant(),
        conversation: None,
        message: &mut message,
        spec: &spec,
        idempotency: key.map(|key| (key, &record)),
        admission,
    };
    StartArgs::of(&new)
        .unwrap()
        .expect("a record cut at its place")
}

/// `agent_runner_start_many` as the batchers call it.
async fn call_many(
    connection: &mut PgConnection,
    starts: &[StartArgs],
    again: bool,
) -> Vec<(String, Option<i64>, Option<i64>)> {
    Columns::of(starts.iter())
        .bind("conformance", again)
        .fetch_all(connection)
        .await
        .unwrap()
}

/// How many messages, and how many idempotency keys, `id` has in the database.
async fn rows_of(connection: &mut PgConnection, id: uuid::Uuid) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM messages WHERE id = $1), \
                (SELECT count(*) FROM idempotency_keys WHERE message_id = $1)",
    )
    .bind(id)
    .fetch_one(connection)
    .await
    .unwrap()
}

/// One batch of five: a plain start, one whose key another message holds, one whose rule
/// reads the conversation's live message, one over the tenant's limit, and a plain one
/// after them. Each is answered on its own; those that need deciding wrote nothing (their
/// keys included), and the places written follow on with no gap.
#[tokio::test]
async fn one_batch_answers_each_start_as_a_call_of_its_own_would() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, opening, _) = databases.opened().await;
    let mut connection = PgConnection::connect(&databases.url()).await.unwrap();
    let holder = running_message(opening.id, 0);
    let held = call_many(
        &mut connection,
        &[args_of(&holder, Admission::default(), Some("held"))],
        false,
    )
    .await;
    assert_eq!(held, [("inserted".to_owned(), Some(2), Some(2))]);

    let plain = running_message(opening.id, 0);
    let taken = running_message(opening.id, 0);
    let alone = running_message(opening.id, 0);
    let limited = running_message(opening.id, 0);
    let last = running_message(opening.id, 0);
    let alone_rule = Admission {
        rule: ConversationRule::Alone,
        ..Admission::default()
    };
    let at_limit = Admission {
        max_running: 1,
        ..Admission::default()
    };
    let answers = call_many(
        &mut connection,
        &[
            args_of(&plain, Admission::default(), Some("plain")),
            args_of(&taken, Admission::default(), Some("held")),
            args_of(&alone, alone_rule, Some("alone")),
            args_of(&limited, at_limit, Some("limited")),
            args_of(&last, Admission::default(), None),
        ],
        false,
    )
    .await;
    let outcomes: Vec<(&str, Option<i64>)> = answers
        .iter()
        .map(|(outcome, seq, _)| (outcome.as_str(), *seq))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("inserted", Some(3)),
            ("key_taken", None),
            ("decide", None),
            ("decide", None),
            ("inserted", Some(4)),
        ]
    );
    for refused in [&taken, &alone, &limited] {
        let rows = rows_of(&mut connection, refused.id.0).await;
        assert_eq!(rows, (0, 0), "nothing of {:?} written", refused.id);
    }
    let key = store.get_idempotency(&tenant(), "held").await.unwrap();
    assert_eq!(key.map(|key| key.message_id), Some(holder.id));
    let _ = connection.close().await;
}

/// A batch made again after it landed (its answer lost with its connection) answers each
/// start's place as first written, and writes nothing twice.
#[tokio::test]
async fn a_batch_tried_again_after_it_landed_is_written_once() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_store, opening, _) = databases.opened().await;
    let mut connection = PgConnection::connect(&databases.url()).await.unwrap();
    let messages: Vec<Message> = (0..3).map(|_| running_message(opening.id, 0)).collect();
    let starts: Vec<StartArgs> = messages
        .iter()
        .enumerate()
        .map(|(i, message)| args_of(message, Admission::default(), Some(&format!("k{i}"))))
        .collect();
    let first = call_many(&mut connection, &starts, false).await;
    let again = call_many(&mut connection, &starts, true).await;
    let places: Vec<Option<i64>> = first.iter().map(|(_, seq, _)| *seq).collect();
    assert_eq!(places, [Some(2), Some(3), Some(4)]);
    assert_eq!(again, first, "the first try's places");
    for message in &messages {
        assert_eq!(rows_of(&mut connection, message.id.0).await, (1, 1));
    }
    let _ = connection.close().await;
}

/// Starts of many runs at once share transactions, and each still lands once, in its
/// place. (Rows written in one transaction share its id, `xmin`; a batch takes its starts'
/// keys in its own transaction, their messages each in a subtransaction.)
#[tokio::test]
async fn starts_at_once_share_transactions() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, opening, _) = databases.opened().await;
    let started: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(
                async move { keyed_start(&store, opening.id, Admission::default(), i).await },
            )
        })
        .collect();
    for started in started {
        assert_eq!(started.await.unwrap(), Inserted::Yes);
    }
    let mut connection = PgConnection::connect(&databases.url()).await.unwrap();
    let (keys, transactions): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT xmin::text) FROM idempotency_keys")
            .fetch_one(&mut connection)
            .await
            .unwrap();
    assert_eq!(keys, 64);
    assert!(
        transactions <= 16,
        "64 starts took {transactions} transactions"
    );
    let written = store
        .list_messages(&tenant(), opening.id, 0, wide())
        .await
        .unwrap();
    let seqs: Vec<u64> = written.items.iter().map(|message| message.seq).collect();
    assert_eq!(seqs, (1..=65).collect::<Vec<u64>>());
    let _ = connection.close().await;
}

/// Two replicas start runs in the same two conversations at once, with keys, under a
/// tenant limit, some under the rule that queues: their batches take the same locks in
/// the same order, so none waits on another for good, and every start lands once, in
/// consecutive places of its conversation.
#[tokio::test]
async fn two_replicas_batch_starts_in_the_same_conversations() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_a, first, _) = own_store(&databases, |settings| settings.pool_size = 8).await;
    let second = peer_store(&databases, "second", |settings| settings.pool_size = 8).await;
    let conversations = [conversation(&tenant()), conversation(&tenant())];
    for opening in &conversations {
        start(&first, opening.id, Some(opening)).await;
    }
    let kinds = [
        Admission::default(),
        Admission {
            max_running: 10_000,
            ..Admission::default()
        },
        Admission {
            rule: ConversationRule::Queue { max_queued: 1_000 },
            ..Admission::default()
        },
    ];
    let started: Vec<_> = (0..120)
        .map(|i| {
            let store = [&first, &second][i % 2].clone();
            let into = conversations[(i / 2) % 2].id;
            let admission = kinds[i % kinds.len()];
            tokio::spawn(async move { keyed_start(&store, into, admission, i).await })
        })
        .collect();
    let all = async {
        for started in started {
            let inserted = started.await.unwrap();
            assert!(
                matches!(inserted, Inserted::Yes | Inserted::Queued { .. }),
                "{inserted:?}"
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every start landed");
    for opening in &conversations {
        let written = first
            .list_messages(&tenant(), opening.id, 0, wide())
            .await
            .unwrap();
        let seqs: Vec<u64> = written.items.iter().map(|message| message.seq).collect();
        assert_eq!(seqs, (1..=61).collect::<Vec<u64>>());
    }
}
