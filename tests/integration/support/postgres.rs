//! Databases of their own for tests on PostgreSQL, dropped with them. Without a reachable
//! server the tests that need one pass and say they were skipped, except under `CI=true`.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

/// The server tests use when `AGENT_RUNNER_TEST_DATABASE_URL` does not name another.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A database made for one test.
pub struct TestDatabase {
    admin: String,
    name: String,
}

fn admin_url() -> String {
    std::env::var("AGENT_RUNNER_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

impl TestDatabase {
    /// A new, empty database; `None` (skip the test) when PostgreSQL cannot be reached
    /// outside CI.
    pub async fn create() -> Option<Self> {
        let admin = admin_url();
        let reached =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin)).await;
        let mut connection = match reached {
            Ok(Ok(connection)) => connection,
            failure => {
                let why = match failure {
                    Ok(Err(err)) => err.to_string(),
                    _ => "no answer within 5 s".to_owned(),
                };
                let place = agent_runner::store::describe_database(&admin);
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "PostgreSQL at {place} is needed in CI: {why}"
                );
                agent_runner::test_utils::say_skipped(&format!("PostgreSQL at {place} cannot be reached ({why}); set AGENT_RUNNER_TEST_DATABASE_URL to run these tests"));
                return None;
            }
        };
        let name = format!("agent_runner_it_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .unwrap();
        let _ = connection.close().await;
        Some(Self { admin, name })
    }

    /// Its URL.
    pub fn url(&self) -> String {
        agent_runner::store::with_database(&self.admin, &self.name)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number `query` (one row, one column) answers.
    pub async fn number(&self, query: &str) -> i64 {
        let mut connection = PgConnection::connect(&self.url()).await.unwrap();
        let (number,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(&mut connection)
            .await
            .unwrap();
        let _ = connection.close().await;
        number
    }

    /// Counts the rows of `table`.
    pub async fn count(&self, table: &str) -> i64 {
        let mut connection = PgConnection::connect(&self.url()).await.unwrap();
        let (count,): (i64,) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&mut connection)
                .await
                .unwrap();
        let _ = connection.close().await;
        count
    }

    /// Counts the events stored, one row per event or per span of them.
    pub async fn events_stored(&self) -> i64 {
        let mut connection = PgConnection::connect(&self.url()).await.unwrap();
        let (count,): (i64,) = sqlx::query_as(
            "SELECT coalesce(sum(coalesce(last_seq, seq) - seq + 1), 0)::bigint FROM events",
        )
        .fetch_one(&mut connection)
        .await
        .unwrap();
        let _ = connection.close().await;
        count
    }
}

impl Drop for TestDatabase {
    /// Drops the database from a thread of its own: this may run inside the test's
    /// runtime, which cannot be blocked on.
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut connection) = PgConnection::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut connection)
                    .await;
                    let _ = connection.close().await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// A TCP proxy in front of PostgreSQL that a test can cut (every connection dropped, new
/// ones refused), stall (every connection kept open and silent, as a link that stopped
/// answering without a reset) and restore: the database going away and coming back,
/// without stopping the server other tests use.
pub struct Proxy {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// Copies `from` to `to`, holding what it read while `stalled`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        while stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let accepting = std::sync::Arc::clone(&open);
        let stalling = std::sync::Arc::clone(&stalled);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let mut cuts = cuts.clone();
                let stalled = std::sync::Arc::clone(&stalling);
                // Only cuts after this connection opened end it.
                cuts.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (from_client, to_client) = client.into_split();
                    let (from_server, to_server) = server.into_split();
                    tokio::select! {
                        () = pump(from_client, to_server, std::sync::Arc::clone(&stalled)) => {}
                        () = pump(from_server, to_client, stalled) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Self {
            addr,
            open,
            stalled,
            cut,
            task,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    /// Keeps every connection open but forwards nothing: the database falls silent.
    pub fn stall(&self) {
        self.stalled
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stalled
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// `url` (of the proxied server) pointed at the proxy.
    pub fn url_through(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (credentials, rest) = rest.rsplit_once('@').map_or(("", rest), |(c, r)| (c, r));
        let path = rest.find('/').map_or("", |at| &rest[at..]);
        let at = if credentials.is_empty() { "" } else { "@" };
        format!("{scheme}://{credentials}{at}{}{path}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `host:port` of a PostgreSQL URL.
pub fn server_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The test configuration on `database`, with `key` (when given) in a key file.
pub fn on_postgres(
    config: String,
    dir: &std::path::Path,
    url: &str,
    key: Option<&agent_runner::store::SecretKey>,
) -> String {
    let key_line = match key {
        Some(key) => {
            let path = dir.join("shared.key");
            std::fs::write(&path, key.to_base64()).unwrap();
            format!("secret_key_file = \"{}\"\n", path.display())
        }
        None => String::new(),
    };
    config
        .replacen("[server]\n", &format!("[server]\n{key_line}"), 1)
        .replacen(
            "[store]\n",
            &format!("[store]\ndatabase_url = \"{url}\"\npool_size = 3\n"),
            1,
        )
}
