//! Busy or lost, on a real PostgreSQL: a call or commit refused while the database answers
//! others is busy (refused, to try again; health and every other run carry on); one the
//! database answers nobody is a lost database (health `NOT_SERVING` until a commit lands).

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use super::tests::{own_store, Databases};
use crate::store::Store;

/// A start in `conversation` (opening it when `opening` holds it) that must be refused
/// as unavailable; the refusal.
async fn refused_start(
    store: &Store,
    conversation: crate::domain::ConversationId,
    opening: Option<&crate::domain::Conversation>,
) -> crate::store::error::StoreError {
    use crate::store::conformance::tenant;
    use crate::store::contract::{Admission, NewMessage};
    let mut message = crate::store::test_records::running_message(conversation, 0);
    let refused = store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: opening,
            message: &mut message,
            spec: &serde_json::json!({}),
            idempotency: None,
            admission: Admission::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.category(),
        crate::store::error::Category::Unavailable
    );
    refused
}

/// A run's start that finds every connection of the pool in use for longer than `[store]
/// pool_wait_ms` is refused (unavailable, to try again, naming the setting), but the store
/// is not marked unwritable: a burst of starts does not turn health `NOT_SERVING` nor
/// refuse every other run. Once a connection is free again, starts go on.
#[tokio::test]
async fn a_busy_pool_refuses_a_start_without_marking_the_store_unwritable() {
    use crate::store::conformance::{start, tenant};
    use crate::store::test_records::conversation;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, _) = own_store(&databases, |settings| {
        settings.pool_size = 1;
        settings.pool_wait = Duration::from_secs(1);
        settings.statement_timeout = Duration::from_secs(1);
    })
    .await;
    let held = backend.connection().await.unwrap();
    let opening = conversation(&tenant());

    let refused = refused_start(&store, opening.id, Some(&opening)).await;
    assert!(
        refused.to_string().contains("pool_wait_ms is 1000"),
        "names the setting that bounds the wait: {refused}"
    );
    assert!(
        *store.writable().borrow(),
        "a busy pool is not a lost database"
    );
    drop(held);
    start(&store, opening.id, Some(&opening)).await;
}

/// A statement cancelled by its timeout while the database answers other commits (here, a
/// start waiting on a conversation's lock that another session holds) is refused as busy,
/// and the store stays writable: a slow moment does not turn health `NOT_SERVING`.
#[tokio::test]
async fn a_statement_timed_out_while_others_are_answered_is_busy_not_lost() {
    use crate::store::conformance::{start, tenant};
    use crate::store::test_records::conversation;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, settings) = own_store(&databases, |settings| {
        settings.statement_timeout = Duration::from_secs(1);
        settings.notify = false;
    })
    .await;
    let busy = conversation(&tenant());
    start(&store, busy.id, Some(&busy)).await;
    let mut other = PgConnection::connect(&settings.url).await.unwrap();
    let mut holding = other.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("{}\u{1}{}", tenant().as_str(), busy.id.0))
        .execute(&mut *holding)
        .await
        .unwrap();
    // Another conversation's start is answered meanwhile: the database is alive.
    let elsewhere = conversation(&tenant());
    start(&store, elsewhere.id, Some(&elsewhere)).await;

    let refused = refused_start(&store, busy.id, None).await;
    assert!(refused.to_string().contains("busy"), "{refused}");
    assert!(
        !refused.to_string().contains("cannot be reached"),
        "{refused}"
    );
    assert!(
        *store.writable().borrow(),
        "a slow moment is not a lost database"
    );
    holding.rollback().await.unwrap();
    start(&store, busy.id, None).await;
}

/// A wait for a connection that timed out says busy only while the database answers
/// others. A commit's wait (on connections of its own) never speaks of the calls' pool,
/// whose `pool_wait_ms` does not bound it; a call's wait on a full pool is not busy once
/// the database has answered nobody for a commit deadline, since a silent database leaves
/// every connection in use too (a run's stream once ended "busy … try again" while the
/// database was silent).
#[tokio::test]
async fn a_timed_out_wait_is_busy_while_the_database_answers_and_lost_after() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, _) = own_store(&databases, |settings| {
        settings.pool_size = 1;
        settings.statement_timeout = Duration::from_secs(1);
    })
    .await;
    // The only connection for calls in use; the database answered just now.
    let held = backend.connection().await.unwrap();
    let commit = backend.commit_failed(sqlx::Error::PoolTimedOut).to_string();
    assert!(commit.contains("busy"), "{commit}");
    assert!(!commit.contains("pool_wait_ms"), "{commit}");
    let call = backend.failed(sqlx::Error::PoolTimedOut).to_string();
    assert!(call.contains("pool_wait_ms"), "{call}");
    assert!(*store.writable().borrow(), "busy is not lost");

    let long_ago = Instant::now()
        .checked_sub(backend.commit_deadline + Duration::from_millis(1))
        .unwrap();
    *backend.last_answer.lock().unwrap() = long_ago;
    let call = backend.failed(sqlx::Error::PoolTimedOut).to_string();
    assert!(call.contains("cannot be reached"), "{call}");
    assert!(!*store.writable().borrow(), "a silent database is lost");
    let commit = backend.commit_failed(sqlx::Error::PoolTimedOut).to_string();
    assert!(commit.contains("cannot be reached"), "{commit}");
    drop(held);
}
