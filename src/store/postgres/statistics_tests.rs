//! The store's tables analyzed as a new database grows under load, on a real PostgreSQL.

use std::time::{Duration, Instant};

use super::tests::{own_store, Databases};

/// How a commit locks its runs' rows (the first step of the committer's statement).
const LOCK_RUNS: &str = "\
SELECT h.id FROM UNNEST($1::text[], $2::uuid[], $3::text[], $4::bigint[]) AS f(tenant, id, owner, epoch) \
CROSS JOIN LATERAL (SELECT m.id FROM messages m WHERE m.tenant = f.tenant AND m.id = f.id \
    AND m.owner = f.owner AND m.epoch = f.epoch FOR SHARE) AS h";

/// `count` running messages of one tenant, each with a record of 1.5 KiB (kept whole in the row), written
/// straight into the table: a new database a moment into a burst.
async fn fill_messages(connection: &mut sqlx::PgConnection, count: i64) {
    sqlx::query(
        "INSERT INTO messages (tenant, id, conversation_id, seq, ordinal, running, record) \
         SELECT 'default', gen_random_uuid(), gen_random_uuid(), 1, 0, true, repeat('x', 1500) \
         FROM generate_series(1, $1)",
    )
    .bind(count)
    .execute(connection)
    .await
    .unwrap();
}

/// When `table` was last analyzed by anyone, if ever.
async fn analyzed_at(
    connection: &mut sqlx::PgConnection,
    table: &str,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let (at,): (Option<chrono::DateTime<chrono::Utc>>,) = sqlx::query_as(
        "SELECT greatest(last_analyze, last_autoanalyze) FROM pg_stat_user_tables \
         WHERE relname = $1",
    )
    .bind(table)
    .fetch_one(connection)
    .await
    .unwrap();
    at
}

/// A new database that fills with runs is analyzed by the store within seconds, and the
/// plan a commit then makes looks each run up by its key: before, a plan made while the
/// table was empty read every run of the tenant for each run it locked. A small table is
/// left alone.
#[tokio::test]
async fn a_new_database_filling_with_runs_is_analyzed_and_runs_are_looked_up_by_key() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, _store, _) = own_store(&databases, |_| {}).await;
    let mut connection = backend.connection().await.unwrap();
    assert_eq!(analyzed_at(&mut connection, "messages").await, None);
    // The store's sessions keep one generic plan per statement, made on first use: here,
    // while the table is empty.
    let prepare = format!("PREPARE lock_runs(text[], uuid[], text[], bigint[]) AS {LOCK_RUNS}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(&mut *connection)
        .await
        .unwrap();
    let arguments = "(ARRAY['default'], ARRAY[gen_random_uuid()], ARRAY['r'], ARRAY[1::bigint])";
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("EXECUTE lock_runs{arguments}")))
        .execute(&mut *connection)
        .await
        .unwrap();

    fill_messages(&mut connection, 1_000).await;
    analyzed_after(&mut connection, "messages", None).await;
    assert_eq!(
        analyzed_at(&mut connection, "replicas").await,
        None,
        "a table of a few rows is left to autovacuum"
    );
    let plan: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE lock_runs{arguments}"
    )))
    .fetch_all(&mut *connection)
    .await
    .unwrap();
    let plan: Vec<String> = plan.into_iter().map(|(line,)| line).collect();
    assert!(
        plan.iter().any(|line| line.contains("using messages_pkey")),
        "{plan:#?}"
    );
}

/// Waits up to 20 s for `table` to be analyzed after `since`; when it was.
async fn analyzed_after(
    connection: &mut sqlx::PgConnection,
    table: &str,
    since: Option<chrono::DateTime<chrono::Utc>>,
) -> chrono::DateTime<chrono::Utc> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match analyzed_at(connection, table).await {
            Some(at) if Some(at) > since => return at,
            _ => {}
        }
        assert!(Instant::now() < until, "{table} was not analyzed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Statistics are taken again only once a table has grown well past them: a table
/// analyzed at its size is left alone, and analyzed again once it grew eightfold.
#[tokio::test]
async fn a_table_is_analyzed_again_only_once_it_outgrew_its_statistics() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, _store, _) = own_store(&databases, |_| {}).await;
    let mut connection = backend.connection().await.unwrap();
    fill_messages(&mut connection, 300).await;
    sqlx::query("ANALYZE messages")
        .execute(&mut *connection)
        .await
        .unwrap();
    let first = analyzed_after(&mut connection, "messages", None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        analyzed_at(&mut connection, "messages").await,
        Some(first),
        "statistics that describe the table are kept"
    );
    fill_messages(&mut connection, 3_000).await;
    analyzed_after(&mut connection, "messages", Some(first)).await;
}
