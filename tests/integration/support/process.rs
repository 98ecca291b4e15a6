//! The real `agent-runner` binary as a child process, for what only a whole process shows:
//! signals, crash recovery, and process-wide tracing.

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use agent_runner::pb::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::{config_toml, FakeOpenAi};

/// A running service process; killed when dropped.
pub struct Service {
    pub child: Child,
    pub addr: SocketAddr,
    /// Where it serves `/metrics`, when it was started with a metrics listener.
    pub metrics: Option<SocketAddr>,
    /// The process's log, for failure messages.
    pub log: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// What the process has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Starts `agent-runner serve` on `dir` and waits until its health check answers.
pub async fn spawn_service(dir: &Path, llm: &FakeOpenAi) -> Service {
    spawn_service_with(dir, llm, &[]).await
}

/// [`spawn_service`] with extra environment variables.
pub async fn spawn_service_with(dir: &Path, llm: &FakeOpenAi, env: &[(&str, String)]) -> Service {
    let config = dir.join("config.toml");
    std::fs::write(&config, config_toml(&llm.base_url(), &dir.join("data"))).unwrap();
    let config = config.display().to_string();
    spawn_serving(dir, &["--config", &config], env).await
}

/// [`spawn_service`] with its configuration file changed by `edit` and, with `nofile`, the
/// process's descriptor limit (soft and hard) set to it.
pub async fn spawn_service_edited(
    dir: &Path,
    llm: &FakeOpenAi,
    nofile: Option<u64>,
    edit: impl FnOnce(String) -> String,
) -> Service {
    let binary = env!("CARGO_BIN_EXE_agent-runner");
    spawn_binary_edited(binary, dir, llm, nofile, false, edit).await
}

/// [`spawn_service_edited`] of the service built as `binary` (a previous release's, say),
/// with a metrics listener of its own when `metrics` is set.
pub async fn spawn_binary_edited(
    binary: &str,
    dir: &Path,
    llm: &FakeOpenAi,
    nofile: Option<u64>,
    metrics: bool,
    edit: impl FnOnce(String) -> String,
) -> Service {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        edit(config_toml(&llm.base_url(), &dir.join("data"))),
    )
    .unwrap();
    let config = config.display().to_string();
    let launch = Launch {
        binary,
        dir,
        nofile,
        metrics,
        args: &["--config", &config],
        env: &[],
    };
    launch.on_free_ports().await
}

/// The service on its embedded default (no configuration file), over `dir/data`, with
/// `env`: what a user who only sets environment variables gets.
pub async fn spawn_on_default(dir: &Path, env: &[(&str, String)]) -> Service {
    let data = dir.join("data").display().to_string();
    spawn_serving(dir, &["--data-dir", &data], env).await
}

async fn spawn_serving(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Service {
    Launch::of_this_build(dir, args, env).on_free_ports().await
}

/// [`spawn_service`] listening on `addr` (a restart where clients expect it).
pub async fn spawn_service_at(dir: &Path, llm: &FakeOpenAi, addr: SocketAddr) -> Service {
    let config = dir.join("config.toml");
    std::fs::write(&config, config_toml(&llm.base_url(), &dir.join("data"))).unwrap();
    let config = config.display().to_string();
    let args = ["--config", config.as_str()];
    match Launch::of_this_build(dir, &args, &[])
        .start(addr, None)
        .await
    {
        Ok(service) => service,
        Err(service) => panic!("the service did not start: {}", service.log_text()),
    }
}

/// How to start one service process.
struct Launch<'a> {
    binary: &'a str,
    dir: &'a Path,
    nofile: Option<u64>,
    metrics: bool,
    args: &'a [&'a str],
    env: &'a [(&'a str, String)],
}

/// How many times a start on ports that turned out taken is tried again.
const PORT_ATTEMPTS: usize = 5;

impl<'a> Launch<'a> {
    fn of_this_build(dir: &'a Path, args: &'a [&'a str], env: &'a [(&'a str, String)]) -> Self {
        Launch {
            binary: env!("CARGO_BIN_EXE_agent-runner"),
            dir,
            nofile: None,
            metrics: false,
            args,
            env,
        }
    }

    /// Starts the process on ports free a moment ago. A free port is only known free
    /// until another socket takes it (any process's outgoing connection may), so a start
    /// that finds one taken is tried again on new ones.
    async fn on_free_ports(&self) -> Service {
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let metrics = self.metrics.then(free_port);
            match self.start(free_port(), metrics).await {
                Ok(service) => return service,
                Err(service) if service.log_text().contains("Address already in use") => {
                    last_log = service.log_text();
                }
                Err(service) => panic!("the service did not start: {}", service.log_text()),
            }
        }
        panic!("the service found its ports taken {PORT_ATTEMPTS} times: {last_log}");
    }

    /// The process on `addr` (and `metrics`), once healthy; `Err` when it exited first.
    async fn start(
        &self,
        addr: SocketAddr,
        metrics: Option<SocketAddr>,
    ) -> Result<Service, Service> {
        let log = self.dir.join(format!("service-{}.log", addr.port()));
        let mut command = match self.nofile {
            Some(limit) => {
                let mut shell = Command::new("bash");
                shell.args([
                    "-c",
                    &format!("ulimit -n {limit} && exec \"$0\" \"$@\""),
                    self.binary,
                ]);
                shell
            }
            None => Command::new(self.binary),
        };
        command.args(["serve", "--listen", &addr.to_string()]);
        if let Some(metrics) = metrics {
            command.args(["--metrics-listen", &metrics.to_string()]);
        }
        let child = command
            .args(self.args)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(name, value)| (*name, value.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        wait_until_healthy(Service {
            child,
            addr,
            metrics,
            log,
        })
        .await
    }
}

async fn wait_until_healthy(mut service: Service) -> Result<Service, Service> {
    let addr = service.addr;
    for _ in 0..200 {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            let check = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: "agentrunner.v1.AgentService".into(),
                })
                .await;
            if check.is_ok() {
                return Ok(service);
            }
        }
        if service.child.try_wait().unwrap().is_some() {
            return Err(service);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the service did not become healthy: {}", service.log_text());
}

/// A channel to the process's gRPC port.
pub async fn channel(service: &Service) -> Channel {
    Channel::from_shared(format!("http://{}", service.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A client of the process's agent service.
pub async fn client(service: &Service) -> AgentServiceClient<Channel> {
    AgentServiceClient::connect(format!("http://{}", service.addr))
        .await
        .unwrap()
}

/// Waits for the process to exit. It sleeps on the test's runtime rather than blocking it:
/// the client's connection lives there and must answer the server's graceful-shutdown
/// handshake (an HTTP/2 ping), or the server would wait for it.
pub async fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Runs the `agent-runner` binary to its exit with `args`, `env` and `stdin`, off the
/// test's runtime (which serves the in-process server the command talks to). Variables a
/// developer's shell may set are cleared first.
pub async fn agent_runner_with(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command.args(&args);
    for name in [
        "AGENT_RUNNER_ADMIN_TOKEN",
        "AGENT_RUNNER_LISTEN",
        "AGENT_RUNNER_API_KEY",
        "AGENT_RUNNER_MODEL",
        "AGENT_RUNNER_TENANT",
        "NO_COLOR",
    ] {
        command.env_remove(name);
    }
    command
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap();
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes()).unwrap();
        }
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
        // A command that hangs fails its test, saying so, rather than stalling the suite.
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > COMMAND_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
                panic!("agent-runner {args:?} did not exit within {COMMAND_LIMIT:?}: {stderr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        }
    })
    .await
    .unwrap()
}

/// How long a command of [`agent_runner_with`] may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// [`agent_runner_with`] with nothing on stdin.
pub async fn agent_runner(args: &[&str], env: &[(&str, &str)]) -> Output {
    agent_runner_with(args, env, "").await
}
