//! A real full disk (a small tmpfs the test mounts), not a simulated one: what the service
//! says while it is full, and that it recovers, health and admission together, once there
//! is room again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::process::{channel, client, spawn_service_edited};
use crate::support::{run_request, run_to_end, FakeOpenAi, Reply};

/// A tmpfs of `megabytes` mounted at `at`, unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path, megabytes: u32) -> Option<Self> {
        std::fs::create_dir_all(at).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(at)
            .status()
            .ok()?
            .success();
        mounted.then(|| Self(at.to_owned()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `path` until the filesystem has no room left.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
}

async fn serving(channel: Channel) -> bool {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "agentrunner.v1.AgentService".into(),
        })
        .await
        .is_ok_and(|r| r.into_inner().status == 1)
}

/// With the data directory's disk full, health is NOT_SERVING and `Run` is UNAVAILABLE;
/// once a file is deleted to make room, health and admission both turn within two seconds
/// of each other and of the room appearing, and a run started then completes.
#[tokio::test]
async fn health_and_admission_recover_together_after_a_real_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Mounted::tmpfs(&dir.path().join("disk"), 24) else {
        agent_runner::test_utils::say_skipped("cannot mount a tmpfs here (needs root); the simulated full-disk test in hardening.rs still runs");
        return;
    };
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&["Fine."], (1, 1)));
    let data = dir.path().join("disk").join("data");
    let service = spawn_service_edited(dir.path(), &llm, None, |toml| {
        toml.replace(
            &format!("data_dir = \"{}\"", dir.path().join("data").display()),
            &format!("data_dir = \"{}\"", data.display()),
        )
    })
    .await;
    let channel = channel(&service).await;
    let mut agents = client(&service).await;
    run_to_end(&mut agents, run_request("before", &[])).await;

    let filler = dir.path().join("disk").join("filler");
    fill(&filler);
    let started = Instant::now();
    loop {
        // Runs write, fail to flush, and turn the store unwritable.
        let _ = agents.run(run_request("while full", &[])).await;
        if !serving(channel.clone()).await {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "health never noticed the full disk: {}",
            service.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = agents
        .run(run_request("still full", &[]))
        .await
        .err()
        .unwrap();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    std::fs::remove_file(&filler).unwrap();
    let room = Instant::now();
    let mut healthy_at = None;
    let mut admitted_at = None;
    while healthy_at.is_none() || admitted_at.is_none() {
        assert!(
            room.elapsed() < Duration::from_secs(10),
            "health {healthy_at:?}, admission {admitted_at:?}: {}",
            service.log_text()
        );
        if healthy_at.is_none() && serving(channel.clone()).await {
            healthy_at = Some(room.elapsed());
        }
        if admitted_at.is_none() {
            if let Ok(stream) = agents.run(run_request("after", &[])).await {
                let mut stream = stream.into_inner();
                let mut last = None;
                while let Ok(Some(event)) = stream.message().await {
                    last = Some(event);
                }
                let completed = matches!(
                    last.and_then(|e| e.event),
                    Some(agent_runner::pb::run_event::Event::End(_))
                );
                assert!(
                    completed,
                    "a run admitted after the disk has room completes"
                );
                admitted_at = Some(room.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (healthy_at, admitted_at) = (healthy_at.unwrap(), admitted_at.unwrap());
    assert!(
        healthy_at < Duration::from_millis(2500),
        "health after {healthy_at:?}"
    );
    assert!(
        admitted_at < Duration::from_millis(2500),
        "admission after {admitted_at:?}"
    );
    drop(service);
}
