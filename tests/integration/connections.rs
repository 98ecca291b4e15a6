//! Connections as an attacker holds them: silent sockets that never speak, more of them
//! than the listener allows, more than the process has descriptors for.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::process::{self, spawn_service_edited};
use crate::support::{FakeOpenAi, TestServer};

/// `SERVING` is 1 in `grpc.health.v1`.
const SERVING: i32 = 1;

async fn health(channel: Channel) -> i32 {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "agentrunner.v1.AgentService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// Whether the server closes `stream` within `within` (a read ends or fails).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            // The server's own HTTP/2 settings frame; keep reading.
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A connection that never sends its HTTP/2 preface is closed after the handshake
/// timeout; one past `server.max_connections` is closed at once; an established channel
/// stays open however long it is idle.
#[tokio::test]
async fn silent_connections_are_closed_and_capped() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.server.max_connections = 8;
        config.server.handshake_timeout_secs = 1;
    })
    .await;
    let established = server.channel().await;
    assert_eq!(health(established.clone()).await, SERVING);

    let mut silent = Vec::new();
    for _ in 0..7 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(server.addr).await.unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_millis(500)).await,
        "a connection past the cap is closed at once"
    );

    let started = Instant::now();
    for stream in &mut silent {
        assert!(closed_within(stream, Duration::from_secs(3)).await);
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(700),
        "closed for silence, not at once: {waited:?}"
    );

    // Past the handshake deadline: an established channel stays however long it idles.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        health(established).await,
        SERVING,
        "an idle established channel is kept"
    );
    assert_eq!(health(server.channel().await).await, SERVING);
}

/// Out of descriptors, health says `NOT_SERVING` on a channel already open and the accept
/// loop backs off instead of spinning a core; once the silent connections are closed,
/// health is `SERVING` again and new clients connect.
#[tokio::test]
async fn running_out_of_descriptors_turns_health_off_until_they_free_up() {
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_service_edited(dir.path(), &llm, Some(96), |toml| {
        toml.replace(
            "[server]\n",
            "[server]\nmax_connections = 1000\nhandshake_timeout_secs = 2\n",
        )
    })
    .await;
    let channel = process::channel(&service).await;
    assert_eq!(health(channel.clone()).await, SERVING);

    let mut silent = Vec::new();
    for _ in 0..150 {
        silent.push(TcpStream::connect(service.addr).await.unwrap());
    }
    let cpu_before = cpu_ticks(service.child.id());
    // Real processes and real descriptors: the service needs a moment to run out of them,
    // and the CPU it spends meanwhile is measured over a second.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(health(channel.clone()).await, SERVING);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spent = cpu_ticks(service.child.id()) - cpu_before;
    assert!(
        spent < 50,
        "the process spent {spent} ticks in 1.3 s: accept spins"
    );

    let started = Instant::now();
    while health(channel.clone()).await != SERVING {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "health did not come back: {}",
            service.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(silent);
    let fresh = process::channel(&service).await;
    assert_eq!(health(fresh).await, SERVING);
}

/// User and system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Over TLS one deadline covers the handshake and the HTTP/2 preface: a socket that never
/// starts its handshake is closed, and so is one that finishes it but sends no preface; a
/// TLS channel in use stays open however long it idles.
#[tokio::test]
async fn over_tls_a_handshake_without_a_preface_is_closed_too() {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};

    let llm = FakeOpenAi::start(vec![]).await;
    let pki = crate::support::tls::Pki::generate();
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::config(&llm.base_url(), dir.path());
    config.tls.cert = Some(pki.server_cert.clone());
    config.tls.key = Some(pki.server_key.clone());
    config.server.handshake_timeout_secs = 1;
    let server = TestServer::start_with(config.validated().unwrap())
        .await
        .keeping(dir);
    let established = Channel::from_shared(format!("https://localhost:{}", server.addr.port()))
        .unwrap()
        .tls_config(pki.client())
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(health(established.clone()).await, SERVING);

    let mut silent = TcpStream::connect(server.addr).await.unwrap();

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&pki.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut secured = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the handshake itself succeeds");

    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    let mut buf = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match secured.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "a TLS connection without a preface is closed"
    );

    // Past the handshake deadline: an established TLS channel stays however long it idles.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        health(established).await,
        SERVING,
        "an idle TLS channel is kept"
    );
}
