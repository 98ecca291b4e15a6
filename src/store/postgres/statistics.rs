//! The planner's statistics of the store's own tables, kept from falling far behind
//! their size.
//!
//! Every statement here runs on a generic plan, made once per connection the first time
//! it runs (see `connect`). A plan made while a table has no statistics, or statistics
//! taken when it was nearly empty, sees a table of a few rows, and for a lookup by
//! `(tenant, id)` any index that starts with `tenant` looks as good as the primary key:
//! measured on a new database under a burst, the commit's lock of its runs' rows went
//! through the index of start times, read every row of the tenant for each run, and cost
//! 160 ms a commit. PostgreSQL replans once a table is analyzed; autovacuum analyzes, but
//! only after its nap (a minute by default), and not at all where it is turned off. So the
//! store analyzes a table of its own itself once the table has grown well past what its
//! statistics describe; where autovacuum keeps up, that never happens.

use std::sync::Weak;
use std::time::Duration;

use super::Postgres;
use crate::tasks::Tasks;

/// How often the tables' sizes are looked at: a new database under a burst grows past
/// [`PAGES`] within a second or two.
const EVERY: Duration = Duration::from_secs(1);

/// A table smaller than this many pages (512 KiB) is left to autovacuum: plans made from
/// statistics of a few hundred messages already look runs up by key (measured: from 300
/// messages' statistics, not from 100's).
const PAGES: i64 = 64;

/// A table is analyzed again once it holds this many times the pages its statistics
/// were taken at, so its plans are made again as it grows.
const GROWTH: i64 = 8;

/// The statistics target of the store's own analyses (PostgreSQL's default is 100).
const SAMPLE: &str = "10";

/// The store's tables (in the schema it migrated) whose statistics fell far behind their
/// size, each as a quoted name ready for `ANALYZE`.
const BEHIND: &str = "\
SELECT format('%I', c.relname) FROM pg_class c \
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' \
    AND pg_relation_size(c.oid) >= $1 * current_setting('block_size')::bigint \
    AND greatest(c.relpages, 0)::bigint * $2 \
        < pg_relation_size(c.oid) / current_setting('block_size')::bigint";

/// Looks at the tables' sizes every [`EVERY`] until the backend is dropped, analyzing
/// those whose statistics fell behind, on a connection of its own (a pool busy with a
/// burst would otherwise keep the analysis waiting behind the burst it is for).
pub fn keep(backend: Weak<Postgres>, tasks: &Tasks) {
    let stopping = tasks.stopping();
    tasks.spawn(async move {
        let mut connection: Option<sqlx::PgConnection> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(EVERY) => {}
                () = stopping.cancelled() => return,
            }
            let Some(options) = backend.upgrade().map(|b| b.pool.connect_options()) else {
                return;
            };
            // A tenth of the default sample: the lookups these plans are for need only
            // how the keys spread, and a table of wide records took 0.76 s of the
            // database's CPU to analyze at the default (0.05 s at this).
            let options = (*options)
                .clone()
                .options([("default_statistics_target", SAMPLE)]);
            let looked = async {
                let held = match connection.take() {
                    Some(held) => held,
                    None => sqlx::ConnectOptions::connect(&options).await?,
                };
                let held = connection.insert(held);
                analyze_behind(held).await
            };
            match tokio::time::timeout(EVERY * 30, looked).await {
                Ok(Ok(analyzed)) => {
                    if !analyzed.is_empty() {
                        tracing::debug!(tables = ?analyzed, "analyzed tables that outgrew their statistics");
                    }
                }
                // The database is away or slow: heartbeats and calls say so; connected
                // again next time.
                Ok(Err(_)) | Err(_) => connection = None,
            }
        }
    });
}

/// Analyzes the tables whose statistics fell behind their size, and names them.
async fn analyze_behind(connection: &mut sqlx::PgConnection) -> Result<Vec<String>, sqlx::Error> {
    let behind: Vec<(String,)> = sqlx::query_as(BEHIND)
        .bind(PAGES)
        .bind(GROWTH)
        .fetch_all(&mut *connection)
        .await?;
    let mut analyzed = Vec::with_capacity(behind.len());
    for (table,) in behind {
        // The name is the catalog's own, quoted by `format('%I')`.
        let statement = format!("ANALYZE {table}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut *connection)
            .await?;
        analyzed.push(table);
    }
    Ok(analyzed)
}
