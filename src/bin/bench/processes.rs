//! The service and the scripted LLM as child processes, so the service's memory is its own.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A child process stopped when dropped: asked to stop (SIGTERM, so the service exports
/// its last spans and flushes), then killed if it has not exited within five seconds.
pub struct Process {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Process {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        terminate(&self.child);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn terminate(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: sends a signal to our own child, whose pid has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn terminate(_child: &Child) {}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .context("the benchmark binary has no directory")?;
    let path = dir.join(name);
    anyhow::ensure!(
        path.exists(),
        "{} not found; build with `cargo build --release --bins`",
        path.display()
    );
    Ok(path)
}

pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts the scripted LLM with delays.
pub async fn start_mock(ttft: Duration, chunk_delay: Duration) -> anyhow::Result<Process> {
    start_mock_with(ttft, chunk_delay, &[]).await
}

/// Starts the scripted LLM with delays and extra arguments.
pub async fn start_mock_with(
    ttft: Duration,
    chunk_delay: Duration,
    extra: &[&str],
) -> anyhow::Result<Process> {
    let addr = free_addr()?;
    let child = Command::new(sibling("agent-runner-mock-llm")?)
        .args(["--listen", &addr.to_string()])
        .args(["--ttft-ms", &ttft.as_millis().to_string()])
        .args(["--chunk-delay-ms", &chunk_delay.as_millis().to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()?;
    let process = Process { child, addr };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(process);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the mock LLM did not start")
}

/// Starts the service on `dir` with the mock LLM as provider `mock`.
pub async fn start_service(
    dir: &Path,
    llm: SocketAddr,
    env: &[(String, String)],
) -> anyhow::Result<Process> {
    start_service_with(dir, llm, env, "").await
}

/// [`start_service`] with `extra` appended to its configuration file (model tables, say).
pub async fn start_service_with(
    dir: &Path,
    llm: SocketAddr,
    env: &[(String, String)],
    extra: &str,
) -> anyhow::Result<Process> {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = \"{}\"\nshutdown_grace_secs = 5\n\n[providers.mock]\nbase_url = \"http://{llm}/v1\"\nfirst_byte_timeout_secs = 60\n{extra}",
            dir.join("data").display()
        ),
    )?;
    let addr = free_addr()?;
    let child = Command::new(sibling("agent-runner")?)
        .args(["serve", "--listen", &addr.to_string(), "--config"])
        .arg(&config)
        .env("RUST_LOG", "error")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .spawn()?;
    let process = Process { child, addr };
    for _ in 0..400 {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            let request = HealthCheckRequest {
                service: "agentrunner.v1.AgentService".into(),
            };
            if let Ok(response) = HealthClient::new(channel).check(request).await {
                if response.into_inner().status == ServingStatus::Serving as i32 {
                    return Ok(process);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the service did not become healthy")
}

/// Resident and peak resident memory of a process, in KiB.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = status(pid);
    (status_kib(&status, "VmRSS:"), status_kib(&status, "VmHWM:"))
}

/// Resident memory and, of it, the anonymous part (its heap and stacks), in KiB, from one
/// read: the anonymous part leaves out the binary's own pages, which differ by megabytes
/// between two copies of one binary and so blur a comparison of builds.
pub fn resident_and_anon_kib(pid: u32) -> (u64, u64) {
    let status = status(pid);
    (
        status_kib(&status, "VmRSS:"),
        status_kib(&status, "RssAnon:"),
    )
}

fn status(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
}

fn status_kib(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) a process has used so far. `/proc/<pid>/stat` counts it in
/// clock ticks of 1/100 s (Linux's USER_HZ, fixed for user space).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its `)` are plain.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15, i.e. 12 and 13 after the name's `)`.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

/// Bytes a process has caused to be written to storage so far (`write_bytes` of
/// `/proc/<pid>/io`: what its writes dirtied, whoever later flushes it), 0 when unreadable.
pub fn written_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes of the files under `dir`, every level down.
pub fn directory_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => directory_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}
