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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use tokio::task::JoinHandle;

use crate::tasks::Tasks;

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

/// The store's analyses, looked for on each heartbeat (whose connection runs the one
/// catalog query) and run one batch at a time on a connection opened for them, so neither
/// the heartbeat waits on an analysis nor a busy pool keeps the analysis waiting behind
/// the burst it is for.
#[derive(Default)]
pub struct Statistics {
    /// The batch of analyses under way, if any.
    analyzing: Option<JoinHandle<()>>,
    /// When each table was last given to an analysis: one that does not take (a table the
    /// service does not own is skipped with a warning) is tried at most once a [`RETRY`].
    tried: HashMap<String, Instant>,
}

/// How long a table given to an analysis is not given again.
const RETRY: Duration = Duration::from_secs(60);

/// How long one batch of analyses may take, its connection included.
const LIMIT: Duration = Duration::from_secs(60);

impl Statistics {
    /// Finds on `connection` the tables whose statistics fell behind their size and, unless
    /// a batch is under way, starts analyzing them on `tasks`, connecting with `options`.
    pub async fn look(
        &mut self,
        connection: &mut sqlx::PgConnection,
        options: &PgConnectOptions,
        tasks: &Tasks,
    ) -> Result<(), sqlx::Error> {
        if self
            .analyzing
            .as_ref()
            .is_some_and(|analyzing| !analyzing.is_finished())
        {
            return Ok(());
        }
        let behind: Vec<(String,)> = sqlx::query_as(BEHIND)
            .bind(PAGES)
            .bind(GROWTH)
            .fetch_all(connection)
            .await?;
        let now = Instant::now();
        self.tried.retain(|_, at| now.duration_since(*at) < RETRY);
        let due: Vec<String> = behind
            .into_iter()
            .map(|(table,)| table)
            .filter(|table| !self.tried.contains_key(table))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        self.tried
            .extend(due.iter().map(|table| (table.clone(), now)));
        // A tenth of the default sample: the lookups these plans are for need only how
        // the keys spread, and a table of wide records took 0.76 s of the database's CPU
        // to analyze at the default (0.05 s at this).
        let options = options
            .clone()
            .options([("default_statistics_target", SAMPLE)]);
        // Bounded, and dropped once the store stops: an analysis holds nothing that must
        // be finished, and one stuck on a silent server would hold every later one back.
        let stopping = tasks.stopping();
        self.analyzing = Some(tasks.spawn(async move {
            let analyzed = tokio::select! {
                analyzed = tokio::time::timeout(LIMIT, analyze(&options, &due)) => analyzed,
                () = stopping.cancelled() => return,
            };
            match analyzed {
                Ok(Ok(())) => tracing::debug!(tables = ?due, "analyzed tables that outgrew their statistics"),
                Ok(Err(err)) => tracing::warn!(tables = ?due, error = %super::error::text(&err), "could not analyze tables that outgrew their statistics"),
                Err(_) => tracing::warn!(tables = ?due, "analyzing tables that outgrew their statistics took over a minute; tried again later"),
            }
        }));
        Ok(())
    }
}

/// Analyzes `tables` (names quoted by the catalog query) on a connection of its own.
async fn analyze(options: &PgConnectOptions, tables: &[String]) -> Result<(), sqlx::Error> {
    let mut connection = sqlx::ConnectOptions::connect(options).await?;
    for table in tables {
        let statement = format!("ANALYZE {table}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut connection)
            .await?;
    }
    sqlx::Connection::close(connection).await
}
