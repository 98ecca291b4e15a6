//! A tenant's limits: concurrent runs under the server's default or its key's, runs per
//! minute with the hint of when to retry, and tokens per day counted across restarts.

use std::time::Duration;

use agent_runner::pb;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

use crate::auth::{auth_server, create_key, requiring_auth, run_as, signed};
use crate::support::{config, end_of, run_request, FakeOpenAi, Reply, TestServer};

/// Limits of a tenant: concurrent runs, runs per minute, tokens per day (0: the default).
pub(crate) fn limits(concurrent: u32, per_minute: u32, tokens: u64) -> pb::TenantLimits {
    pb::TenantLimits {
        max_concurrent_runs: concurrent,
        runs_per_minute: per_minute,
        tokens_per_day: tokens,
        ..pb::TenantLimits::default()
    }
}

fn assert_limit(result: Result<impl std::fmt::Debug, Status>, limit: &str) -> Option<Duration> {
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{limit}: ")),
        "{}",
        status.message()
    );
    status
        .get_details_retry_info()
        .and_then(|retry| retry.retry_delay)
}

/// The server's default limit on concurrent runs holds per tenant: one tenant at its limit
/// does not block another.
#[tokio::test]
async fn concurrent_runs_are_limited_per_tenant_by_the_server_default() {
    let slow = Reply::Slow {
        text: vec!["one", " two", " three"],
        delay_ms: 200,
    };
    let llm = FakeOpenAi::start(vec![slow, Reply::text(&["next"], (3, 1))]).await;
    // Without auth the limits apply to the tenant the header names.
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_concurrent_runs = 1;
    })
    .await;
    let mut agents = server.agents().await;
    let as_tenant = |tenant: &str| {
        let mut request = Request::new(run_request("hi", &[]));
        request
            .metadata_mut()
            .insert("x-tenant-id", tenant.parse().unwrap());
        request
    };
    let mut first = agents.run(as_tenant("acme")).await.unwrap().into_inner();
    let wait = assert_limit(
        agents.run(as_tenant("acme")).await,
        "limits.max_concurrent_runs",
    );
    assert_eq!(
        wait, None,
        "no wait can be promised while a run is in progress"
    );
    // Another tenant has its own count.
    let other = agents.run(as_tenant("globex")).await;
    drop(other.unwrap());
    let mut events = Vec::new();
    while let Some(event) = first.message().await.unwrap() {
        events.push(event);
    }
    end_of(&events);
    // The place is free as soon as the end is seen.
    agents.run(as_tenant("acme")).await.unwrap();
}

/// A key's runs-per-minute limit is enforced, and the refusal says when to retry.
#[tokio::test]
async fn runs_per_minute_follow_the_key_and_say_when_to_retry() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&["ok"], (3, 1)));
    let server = auth_server(&llm, |config| config.limits.runs_per_minute = 5).await;
    let (_, tight) = create_key(&server, "acme", limits(0, 2, 0)).await;
    let (_, default) = create_key(&server, "globex", pb::TenantLimits::default()).await;
    let mut agents = server.agents().await;
    run_as(&mut agents, &tight, "one").await;
    run_as(&mut agents, &tight, "two").await;
    let refused = agents
        .run(signed(run_request("three", &[]), &tight, None))
        .await;
    let wait = assert_limit(refused, "limits.runs_per_minute").unwrap();
    assert!(
        wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
    // The other tenant's key has the server's default of five.
    for query in ["a", "b", "c", "d", "e"] {
        run_as(&mut agents, &default, query).await;
    }
    let refused = agents
        .run(signed(run_request("f", &[]), &default, None))
        .await;
    assert!(assert_limit(refused, "limits.runs_per_minute").is_some());
}

/// A tenant's daily token count survives a restart, so a restart does not reset the limit.
#[tokio::test]
async fn tokens_per_day_are_counted_across_restarts() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&["a long answer"], (80, 40)));
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        let mut config = config(&llm.base_url(), dir.path());
        requiring_auth(&mut config);
        config.limits.tokens_per_day = 100;
        TestServer::start_with(config)
    };
    let server = start().await;
    let (_, key) = create_key(&server, "acme", pb::TenantLimits::default()).await;
    let (_, generous) = create_key(&server, "acme", limits(0, 0, 1_000)).await;
    let mut agents = server.agents().await;
    run_as(&mut agents, &key, "spend").await;
    let refused = agents
        .run(signed(run_request("more", &[]), &key, None))
        .await;
    let wait = assert_limit(refused, "limits.tokens_per_day").unwrap();
    assert!(wait <= Duration::from_secs(86_400));
    // A key with its own, larger budget still runs.
    run_as(&mut agents, &generous, "more").await;
    server.stop().await;

    let server = start().await;
    let mut agents = server.agents().await;
    let refused = agents
        .run(signed(run_request("after restart", &[]), &key, None))
        .await;
    let status = refused.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("used 240 LLM tokens"),
        "{}",
        status.message()
    );
    // Nothing was written for the refused runs.
    assert_eq!(llm.requests().len(), 2);
}
