//! What replicas share: commands sent to a replica that does not hold the run, API keys
//! and providers changed on one replica, and tenant limits counted over all of them.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::store::SecretKey;

use crate::support::postgres::TestDatabase;
use crate::support::process::{client, Service};
use crate::support::replicas::*;
use crate::support::{read_until_delta, run_request, RunRequestExt};
use crate::support::{FakeOpenAi, Reply};

on_both_buses!(commands_reach_the_run: commands_sent_to_a_peer_reach_the_run_over_nats, commands_sent_to_a_peer_reach_the_run_without_nats);

/// Tool outputs, approvals, cancels and deletes sent to a replica that does not hold the
/// run: they are refused as the owner would refuse them, or kept and carried out by the
/// owner; an idempotency key sent to two replicas at once starts one run.
async fn commands_reach_the_run(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::text(&["Order A1 has shipped."], (1, 1)),
        Reply::Stall(vec!["Almost"]),
        slow(20, 100),
        Reply::calls(
            &[],
            vec![crate::support::ScriptedCall::new(
                "gated",
                "eval_expression",
                &["{\"expression\": \"6*7\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["It is 42."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let mut peer = client(&b).await;

    // Tool outputs through the peer: a wrong id is refused naming the field, as the owner
    // refuses it; the right one resumes the run on its owner.
    let (mut stream, mut events) = started_asking(&a, "Where is order A1?").await;
    let id = events[0].message_id.clone();
    let output = |call: &str| shipped(&id, call);
    let refused = peer.submit_tool_outputs(output("nope")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        refused.message(),
        "outputs[0].tool_call_id \"nope\" is not a call the run is waiting for"
    );
    peer.submit_tool_outputs(output("cli")).await.unwrap();
    events.extend(read_within(&mut stream, Duration::from_secs(10)).await);
    match &events.last().unwrap().event {
        Some(pb::run_event::Event::End(end)) => assert_eq!(end.answer, "Order A1 has shipped."),
        other => panic!("the run did not complete: {other:?}"),
    }
    let late = peer.submit_tool_outputs(output("cli")).await.unwrap_err();
    assert_eq!(late.code(), tonic::Code::FailedPrecondition, "{late:?}");

    // A run held by the owner: the peer refuses to delete its conversation, then cancels
    // it; the cancel is answered once the run has ended.
    let (mut stalled, seen) = started(&a, "stall").await;
    let busy = peer
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: seen[0].conversation_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition, "{busy:?}");
    let asked = Instant::now();
    let cancelled = peer
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let took = asked.elapsed();
    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    // Woken by the bus, the owner stops the run at once; its end is then seen within
    // the cancel's own look every 50 ms.
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");
    let rest = read_within(&mut stalled, Duration::from_secs(5)).await;
    assert!(rest.last().is_some(), "the owner's stream ends");
    let again = peer
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);

    // One idempotency key, two replicas at once: one message.
    let mut keyed = run_request("count", &[]);
    keyed.idempotency_key = "order-42".into();
    let (mut on_a, mut on_b) = (client(&a).await, client(&b).await);
    let (first, second) = tokio::join!(on_a.run(keyed.clone()), on_b.run(keyed.clone()));
    let (mut first, mut second) = (first.unwrap().into_inner(), second.unwrap().into_inner());
    let first = read_within(&mut first, Duration::from_secs(20)).await;
    let second = read_within(&mut second, Duration::from_secs(20)).await;
    assert_eq!(first[0].message_id, second[0].message_id);
    assert_eq!(first, second, "the second caller follows the one run");

    // Approvals through the peer: an unknown call is refused as the owner refuses it; the
    // decision resumes the run on its owner, and the approved call runs.
    let gated =
        run_request("6*7?", &[("maths", "eval_expression")]).needs_approval("eval_expression");
    let mut stream = client(&a).await.run(gated).await.unwrap().into_inner();
    let mut events = read_until(&mut stream, |e| {
        matches!(e.event, Some(pb::run_event::Event::ApprovalRequired(_)))
    })
    .await;
    let id = events[0].message_id.clone();
    let decide = |call: &str| approved(&id, call);
    let refused = peer.approve_tool_calls(decide("nope")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    peer.approve_tool_calls(decide("gated")).await.unwrap();
    events.extend(read_within(&mut stream, Duration::from_secs(10)).await);
    match &events.last().unwrap().event {
        Some(pb::run_event::Event::End(end)) => assert_eq!(end.answer, "It is 42."),
        other => panic!("the approved run did not complete: {other:?}"),
    }
    let ran = events.iter().find_map(|event| match &event.event {
        Some(pb::run_event::Event::ToolFinished(finished)) => finished.tool_call.clone(),
        _ => None,
    });
    assert_eq!(ran.unwrap().observation, "42");
}

/// An API key made, or revoked, on one replica is in force on another within a second;
/// a tool provider made or deleted on one is known, or unknown, on another within a second.
#[tokio::test]
async fn keys_and_providers_changed_on_one_replica_hold_on_the_others_within_a_second() {
    use agent_runner::pb::admin_service_client::AdminServiceClient;
    use agent_runner::pb::tool_registry_client::ToolRegistryClient;
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        auth: true,
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let channel = |service: &Service| {
        tonic::transport::Channel::from_shared(format!("http://{}", service.addr))
            .unwrap()
            .connect_lazy()
    };

    let created = AdminServiceClient::new(channel(&a))
        .create_api_key(signed(
            pb::CreateApiKeyRequest {
                tenant: "acme".into(),
                name: "acme-ci".into(),
                limits: None,
            },
            ADMIN_TOKEN,
        ))
        .await
        .unwrap()
        .into_inner();
    let (id, secret) = (created.key.unwrap().id, created.secret);
    // A known message id is not needed: a key that works gets NOT_FOUND, one that does not
    // gets UNAUTHENTICATED.
    let answer = |service: &Service| {
        let mut agents =
            agent_runner::pb::agent_service_client::AgentServiceClient::new(channel(service));
        let secret = secret.clone();
        async move {
            agents
                .get_message(signed(
                    pb::GetMessageRequest {
                        message_id: "00000000-0000-0000-0000-000000000000".into(),
                    },
                    &secret,
                ))
                .await
                .unwrap_err()
                .code()
        }
    };
    let made = within("a key made on a works on b", || async {
        answer(&b).await == tonic::Code::NotFound
    })
    .await;
    AdminServiceClient::new(channel(&a))
        .revoke_api_key(signed(pb::RevokeApiKeyRequest { id }, ADMIN_TOKEN))
        .await
        .unwrap();
    let revoked = within("a key revoked on a is refused on b", || async {
        answer(&b).await == tonic::Code::Unauthenticated
    })
    .await;
    assert!(made < Duration::from_secs(1), "made after {made:?}");
    assert!(
        revoked < Duration::from_secs(1),
        "revoked after {revoked:?}"
    );

    let tenant_key = AdminServiceClient::new(channel(&a))
        .create_api_key(signed(
            pb::CreateApiKeyRequest {
                tenant: "acme".into(),
                name: "tools".into(),
                limits: None,
            },
            ADMIN_TOKEN,
        ))
        .await
        .unwrap()
        .into_inner()
        .secret;
    within("the tools key works on b", || async {
        let mut tools = ToolRegistryClient::new(channel(&b));
        tools
            .list_providers(signed(pb::ListProvidersRequest::default(), &tenant_key))
            .await
            .is_ok()
    })
    .await;
    let provider = pb::ToolProvider {
        name: "handbook".into(),
        description: "The staff handbook".into(),
        source: Some(pb::ProviderSource {
            source: Some(pb::provider_source::Source::Knowledge(
                pb::KnowledgeSource {
                    endpoint: "http://127.0.0.1:9".into(),
                    knowledge_id: "kb-1".into(),
                    top_k: 2,
                    score_threshold: 0.5,
                },
            )),
        }),
        ..Default::default()
    };
    ToolRegistryClient::new(channel(&a))
        .create_provider(signed(
            pb::CreateProviderRequest {
                provider: Some(provider),
            },
            &tenant_key,
        ))
        .await
        .unwrap();
    let known = |service: &Service| {
        let mut tools = ToolRegistryClient::new(channel(service));
        let tenant_key = tenant_key.clone();
        async move {
            let got = tools
                .get_provider(signed(
                    pb::GetProviderRequest {
                        name: "handbook".into(),
                    },
                    &tenant_key,
                ))
                .await;
            got.is_ok()
        }
    };
    let created = within("a provider made on a is known on b", || async {
        known(&b).await
    })
    .await;
    ToolRegistryClient::new(channel(&a))
        .delete_provider(signed(
            pb::DeleteProviderRequest {
                name: "handbook".into(),
            },
            &tenant_key,
        ))
        .await
        .unwrap();
    let deleted = within("a provider deleted on a is unknown on b", || async {
        !known(&b).await
    })
    .await;
    assert!(created < Duration::from_secs(1), "known after {created:?}");
    assert!(
        deleted < Duration::from_secs(1),
        "unknown after {deleted:?}"
    );
}

/// A tenant's limit of runs at once holds across replicas: 30 runs started at once over
/// three replicas against a limit of 2 admit exactly 2; a dead replica's run, taken over
/// by a peer, keeps its place until it ends.
#[tokio::test]
async fn tenant_limits_are_exact_across_replicas() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Working"]); 4]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let limited = Options {
        max_concurrent_runs: 2,
        ..Options::default()
    };
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        replicas.push(replica_on(dir.path(), &llm, &database, &key, id, &limited).await);
    }
    let mut clients = Vec::new();
    for replica in &replicas {
        clients.push(client(replica).await);
    }
    let starts = (0..30).map(|i| {
        let mut agents = clients[i % 3].clone();
        async move { (i % 3, agents.run(run_request("stall", &[])).await) }
    });
    let mut admitted = Vec::new();
    let mut refused = 0;
    for (replica, started) in futures::future::join_all(starts).await {
        match started {
            Ok(stream) => admitted.push((replica, stream.into_inner())),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                assert!(
                    status.message().contains("max_concurrent_runs"),
                    "{status:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(admitted.len(), 2, "exactly the limit over three replicas");
    assert_eq!(refused, 28);

    // The replica holding the first admitted run dies: a peer takes the run over, so it
    // keeps its place, which frees once the run ends.
    let (dead, mut stream) = admitted.remove(0);
    let id = read_until_delta(&mut stream).await[0].message_id.clone();
    let mut killed = replicas.remove(dead);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let survivor = &replicas[0];
    let mut followed = attach(survivor, &id, 0).await;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), followed.message()).await;
        let event = next.expect("taken over in time").unwrap().unwrap();
        if matches!(event.event, Some(pb::run_event::Event::RoundRestarted(_))) {
            break;
        }
    }
    let status = client(survivor)
        .await
        .run(run_request("stall", &[]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "still held");
    let cancelled = client(survivor)
        .await
        .cancel(pb::CancelRequest {
            message_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    let freed = within("the place frees once the run ends", || async {
        client(survivor)
            .await
            .run(run_request("stall", &[]))
            .await
            .is_ok()
    })
    .await;
    assert!(freed < Duration::from_secs(2), "freed after {freed:?}");
}

on_both_buses!(cancels_through_a_peer: cancels_sent_to_a_peer_end_their_runs_within_a_second_over_nats, cancels_sent_to_a_peer_end_their_runs_within_a_second_without_nats);

/// 24 runs on one replica, each cancelled through another at once: every cancel is
/// answered CANCELLED within a second, and every owner's stream ends.
async fn cancels_through_a_peer(bus: &Bus) {
    const RUNS: usize = 24;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Almost"]); RUNS]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let (stream, seen) = started(&a, "stall").await;
        runs.push((seen[0].message_id.clone(), stream));
    }
    let peer = client(&b).await;
    let cancels = runs.into_iter().map(|(id, mut stream)| {
        let mut peer = peer.clone();
        async move {
            let asked = Instant::now();
            let status = peer
                .cancel(pb::CancelRequest { message_id: id })
                .await
                .unwrap()
                .into_inner()
                .status;
            let took = asked.elapsed();
            let rest = read_within(&mut stream, Duration::from_secs(5)).await;
            (status, took, rest)
        }
    });
    let mut took = Vec::new();
    for (status, duration, rest) in futures::future::join_all(cancels).await {
        assert_eq!(status, pb::MessageStatus::Cancelled as i32);
        assert!(!rest.is_empty(), "the owner's stream ends");
        took.push(duration);
    }
    took.sort();
    eprintln!(
        "cancels through a peer: p50 {:?}, max {:?}",
        took[RUNS / 2],
        took[RUNS - 1]
    );
    assert!(took[RUNS - 1] < Duration::from_secs(1), "{took:?}");
}
