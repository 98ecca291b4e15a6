//! `--database-url`: the cases on PostgreSQL, in a database made for the sitting and
//! dropped after it, and what PostgreSQL spent on them.

use std::time::Duration;

use anyhow::Context;
use sqlx::{Connection, PgConnection};

use crate::processes::cpu_time;

/// A database made for one sitting of the benchmark.
pub struct BenchDatabase {
    admin: String,
    name: String,
    /// Its URL.
    pub url: String,
}

impl BenchDatabase {
    /// A new database on the server `admin` names.
    pub async fn create(admin: &str) -> anyhow::Result<Self> {
        let place = agent_runner::store::describe_database(admin);
        let mut connection = PgConnection::connect(admin)
            .await
            .with_context(|| format!("cannot reach PostgreSQL at {place}"))?;
        let name = format!("agent_runner_bench_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok(Self {
            admin: admin.to_owned(),
            url: agent_runner::store::with_database(admin, &name),
            name,
        })
    }

    /// Drops it.
    pub async fn drop_database(self) -> anyhow::Result<()> {
        let mut connection = PgConnection::connect(&self.admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut connection)
        .await?;
        let _ = connection.close().await;
        Ok(())
    }
}

/// What the server processes serving the database at `url` have spent so far: their CPU
/// time (the service's pooled connections are long-lived, so their backends are too) and
/// the transactions committed in it.
pub async fn spent(url: &str) -> anyhow::Result<(Duration, i64)> {
    let mut connection = PgConnection::connect(url).await?;
    let pids: Vec<(i32,)> = sqlx::query_as(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut connection)
    .await?;
    let (commits,): (i64,) = sqlx::query_as(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut connection)
    .await?;
    let _ = connection.close().await;
    let cpu = pids
        .iter()
        .filter_map(|(pid,)| u32::try_from(*pid).ok())
        .map(cpu_time)
        .sum();
    Ok((cpu, commits))
}

/// Bytes of write-ahead log the server at `url` has written so far (for all its
/// databases: the sitting's is the only one written to while it runs).
pub async fn wal_bytes(url: &str) -> anyhow::Result<i64> {
    let mut connection = PgConnection::connect(url).await?;
    let (written,): (i64,) = sqlx::query_as("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
        .fetch_one(&mut connection)
        .await?;
    let _ = connection.close().await;
    Ok(written)
}
