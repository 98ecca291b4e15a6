//! Stored agents across replica processes on one PostgreSQL database: a version or an
//! alias changed on one replica is what the next run on another resolves, and a parent
//! and its sub-agent whose replica is killed mid-child are taken over together, the child
//! going on from its last durable round and the parent following that same child (never a
//! second one), carrying each of its events once.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::agent_registry_client::AgentRegistryClient;
use agent_runner::pb::run_event::Event;

use crate::support::postgres::TestDatabase;
use crate::support::process::{channel, client};
use crate::support::replicas::*;
use crate::support::{message, run_request, FakeOpenAi, Reply, RunRequestExt, ScriptedCall};

/// The model's first turn of a parent that asks the stored `researcher` (call `c1`).
fn asks_the_researcher() -> Reply {
    Reply::calls(
        &[],
        vec![ScriptedCall::new(
            "c1",
            "researcher",
            &[r#"{"input": "capital of France?"}"#],
        )],
        (5, 2),
    )
}

/// `message` with the A2A version header every call carries.
fn a2a_call<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("a2a-version", "1.0".parse().unwrap());
    request
}

/// Stores the `counter` agent through `service` and starts an A2A task of it there,
/// returned at once: its id.
async fn counting_task(service: &crate::support::process::Service) -> String {
    use agent_runner::a2a_pb as a2a;
    let mut request = run_request("unused", &[]);
    request.agent_mut().instruction = "Count.".into();
    AgentRegistryClient::new(channel(service).await)
        .create_agent(pb::CreateAgentRequest {
            agent_id: "counter".into(),
            config: request.agent,
            ..Default::default()
        })
        .await
        .unwrap();
    let send = a2a::SendMessageRequest {
        tenant: "counter".into(),
        message: Some(a2a::Message {
            message_id: "r-1".into(),
            role: a2a::Role::User.into(),
            parts: vec![a2a::Part {
                content: Some(a2a::part::Content::Text("Count slowly.".into())),
                ..Default::default()
            }],
            ..Default::default()
        }),
        configuration: Some(a2a::SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        metadata: None,
    };
    let started = a2a::a2a_service_client::A2aServiceClient::new(channel(service).await)
        .send_message(a2a_call(send))
        .await
        .unwrap()
        .into_inner();
    let Some(a2a::send_message_response::Payload::Task(task)) = started.payload else {
        panic!("a task was expected");
    };
    task.id
}

/// The model's turns when a parent's child is cut mid-answer and taken over: the parent
/// asks the researcher, the child writes "Pa" and stalls, the child's round is made again
/// ("Paris."), and the parent answers "Done.".
fn child_cut_then_answered() -> Vec<Reply> {
    vec![
        asks_the_researcher(),
        Reply::Stall(vec!["Pa"]),
        Reply::text(&["Paris."], (7, 3)),
        Reply::text(&["Done."], (5, 2)),
    ]
}

/// Stores the `researcher` agent through `service`, starts there a parent run that may
/// call it, and reads the parent's stream until the child has written: returns the
/// stream and the parent's and the child's message ids.
async fn parent_with_its_child_writing(
    service: &crate::support::process::Service,
) -> (tonic::Streaming<pb::RunEvent>, String, String) {
    let (mut stream, parent_id) = parent_of_the_researcher(service).await;
    let mut child_id = String::new();
    while let Some(event) = stream.message().await.unwrap() {
        if let Some(Event::Child(child)) = &event.event {
            child_id.clone_from(&child.message_id);
            if child
                .event
                .as_ref()
                .is_some_and(|e| matches!(e.event, Some(Event::Delta(_))))
            {
                break;
            }
        }
    }
    (stream, parent_id, child_id)
}

/// Stores the `researcher` agent through `service` and starts there a parent run that may
/// call it: returns its stream (its first event read) and its message id.
async fn parent_of_the_researcher(
    service: &crate::support::process::Service,
) -> (tonic::Streaming<pb::RunEvent>, String) {
    let mut library = AgentRegistryClient::new(channel(service).await);
    let mut researcher = run_request("unused", &[]);
    researcher.agent_mut().instruction = "You research.".into();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "researcher".into(),
            config: researcher.agent.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut parent = run_request("What is the capital of France?", &[]);
    parent.agent_mut().sub_agents = vec![pb::AgentRef {
        agent_id: "researcher".into(),
        ..Default::default()
    }];
    let mut stream = client(service)
        .await
        .run(parent)
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("the run starts");
    (stream, first.message_id)
}

/// A parent and its child, taken over together after their owner's `kill -9`: a cancel
/// of the parent on its new owner reaches the child it found (and follows by attaching)
/// within a second, as it reaches a child it started itself.
#[tokio::test]
async fn a_cancel_after_a_takeover_reaches_the_children_found() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        asks_the_researcher(),
        Reply::Stall(vec!["Pa"]),
        Reply::Stall(vec!["Still thinking"]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options {
        bus,
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let (_stream, parent_id, child_id) = parent_with_its_child_writing(&a).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    // The child, taken over, is writing again and its parent follows it.
    let mut followed = attach(&b, &parent_id, 0).await;
    let restarted_child = |e: &pb::RunEvent| {
        matches!(&e.event, Some(Event::Child(child))
            if child.event.as_ref().is_some_and(|inner| inner.seq > 3
                && matches!(inner.event, Some(Event::Delta(_)))))
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        read_until(&mut followed, restarted_child),
    )
    .await
    .expect("the child goes on on b");

    let mut agents = client(&b).await;
    agents
        .cancel(pb::CancelRequest {
            message_id: parent_id.clone(),
        })
        .await
        .unwrap();
    let cancelled = std::time::Instant::now();
    let mut status = 0;
    while cancelled.elapsed() < Duration::from_secs(3) {
        status = message(&mut agents, child_id.clone()).await.status;
        if status == pb::MessageStatus::Cancelled as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status,
        pb::MessageStatus::Cancelled as i32,
        "the child found after the takeover is cancelled with its parent"
    );
    assert!(
        cancelled.elapsed() < Duration::from_secs(1),
        "the child stopped {:?} after the cancel",
        cancelled.elapsed()
    );
    assert_eq!(
        message(&mut agents, parent_id).await.status,
        pb::MessageStatus::Cancelled as i32
    );
}

/// A parent ended by a sweep (taken over as often as it may be, then its owner lost again)
/// has no task left to stop its child: the child, taken over on a live replica, is
/// cancelled there within a second of its parent's end, never answered to nobody.
#[tokio::test]
async fn a_child_whose_parent_ended_owner_lost_is_cancelled() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Thinking"]),
        asks_the_researcher(),
        Reply::Stall(vec!["Pa"]),
        Reply::text(&["Paris."], (7, 3)),
        Reply::text(&["Done."], (5, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options {
        bus,
        max_takeovers: Some(1),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let mut b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let (mut stream, parent_id) = parent_of_the_researcher(&a).await;
    read_until(&mut stream, |e| matches!(e.event, Some(Event::Delta(_)))).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    // Taken over once on b, the parent starts its child there.
    let mut followed = attach(&b, &parent_id, 0).await;
    let child_writes = |e: &pb::RunEvent| {
        matches!(&e.event, Some(Event::Child(child))
            if child.event.as_ref().is_some_and(|inner| matches!(inner.event, Some(Event::Delta(_)))))
    };
    let written = tokio::time::timeout(
        Duration::from_secs(30),
        read_until(&mut followed, child_writes),
    )
    .await
    .expect("the parent starts its child on b");
    let Some(Event::Child(child)) = &written.last().unwrap().event else {
        unreachable!()
    };
    let child_id = child.message_id.clone();
    b.child.kill().unwrap();
    b.child.wait().unwrap();

    // c ends the parent (its takeovers spent) and takes the child over (it has none).
    let c = replica_on(dir.path(), &llm, &database, &key, "c", &options).await;
    let mut agents = client(&c).await;
    let waited = std::time::Instant::now();
    let mut parent_ended = None;
    let (parent, child) = loop {
        let parent = message(&mut agents, parent_id.clone()).await;
        if parent.status == pb::MessageStatus::Interrupted as i32 && parent_ended.is_none() {
            parent_ended = Some(std::time::Instant::now());
        }
        let child = message(&mut agents, child_id.clone()).await;
        let terminal = ![
            pb::MessageStatus::Running,
            pb::MessageStatus::WaitingToolOutputs,
        ]
        .map(|s| s as i32)
        .contains(&child.status);
        if terminal || waited.elapsed() > Duration::from_secs(30) {
            break (parent, child);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(parent.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(parent.error.unwrap().code, "owner_lost");
    assert_eq!(
        child.status,
        pb::MessageStatus::Cancelled as i32,
        "the child of an ended parent is stopped, not answered: {child:?}"
    );
    let after = parent_ended.expect("the parent ended").elapsed();
    assert!(
        after < Duration::from_secs(1),
        "the child stopped {after:?} after its parent"
    );
    assert_eq!(
        llm.requests().len(),
        3,
        "the child asked the model nothing more"
    );
}

/// A rolling upgrade: a parent and its child started by the previous release (whose child
/// ids derive from the parent and the call id alone, with no place recorded) and taken over
/// by this one, after the old replica's `kill -9`: the resumed parent finds that child by
/// its old id and follows it, never starting a second one. Needs the previous release's
/// binary in `AGENT_RUNNER_PREVIOUS_RELEASE` (built from the tag before this one); skipped
/// without it, saying so.
#[tokio::test]
async fn children_the_previous_release_started_are_found_after_a_takeover() {
    let Ok(previous) = std::env::var("AGENT_RUNNER_PREVIOUS_RELEASE") else {
        agent_runner::test_utils::say_skipped(
            "AGENT_RUNNER_PREVIOUS_RELEASE names no previous release's binary",
        );
        return;
    };
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(child_cut_then_answered()).await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let old = Options {
        binary: Some(previous),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &old).await;
    let (_stream, parent_id, child_id) = parent_with_its_child_writing(&a).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &Options::default()).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let mut followed = attach(&b, &parent_id, 0).await;
    let events = read_within(&mut followed, Duration::from_secs(40)).await;
    let Some(Event::End(end)) = &events.last().unwrap().event else {
        panic!("the parent ends normally: {events:?}");
    };
    assert_eq!(end.answer, "Done.");
    let children: std::collections::BTreeSet<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Child(child)) => Some(child.message_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        children.into_iter().collect::<Vec<_>>(),
        [child_id.as_str()],
        "the old child followed, never a second"
    );
    assert_eq!(
        llm.requests().len(),
        4,
        "the child's cut round is made again, once"
    );
    let mut peer = client(&b).await;
    let child = message(&mut peer, child_id).await;
    assert_eq!(child.status, pb::MessageStatus::Completed as i32);
    assert_eq!(child.answer, "Paris.");
}

/// A parent run taken over by a peer finds the child it had started and follows it, instead
/// of starting the child's work again.
#[tokio::test]
async fn a_parent_taken_over_follows_its_child_instead_of_starting_another() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let llm = FakeOpenAi::start(child_cut_then_answered()).await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options {
        bus,
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let (_stream, parent_id, _child_id) = parent_with_its_child_writing(&a).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let mut followed = attach(&b, &parent_id, 0).await;
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(40), followed.message()).await;
        let Some(event) = next.expect("the parent finishes in time").unwrap() else {
            break;
        };
        events.push(event);
    }
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    let Some(Event::End(end)) = &events.last().unwrap().event else {
        panic!("the parent ends normally: {events:?}");
    };
    assert_eq!(end.answer, "Done.");
    let mut child_seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for event in &events {
        if let Some(Event::Child(child)) = &event.event {
            let inner = child.event.as_ref().unwrap();
            child_seqs
                .entry(child.message_id.clone())
                .or_default()
                .push(inner.seq);
        }
    }
    assert_eq!(child_seqs.len(), 1, "one child, never a second");
    let (child_id, carried) = child_seqs.into_iter().next().unwrap();
    assert_eq!(
        carried,
        (1..=carried.len() as u64).collect::<Vec<_>>(),
        "each child event carried once, in order"
    );
    assert_eq!(
        llm.requests().len(),
        4,
        "the child's cut round is made again, once"
    );
    let mut peer = client(&b).await;
    let child = message(&mut peer, child_id).await;
    assert_eq!(child.status, pb::MessageStatus::Completed as i32);
    assert_eq!(child.answer, "Paris.");
    let rounds = crate::support::thoughts(&mut peer, parent_id).await;
    assert_eq!(rounds[0].tool_calls[0].observation, "Paris.");
}

/// Stored agents live in the shared store only: a version added and an alias moved on one
/// replica are what the next run on another resolves, with no wait.
#[tokio::test]
async fn a_new_version_and_a_moved_alias_are_in_force_on_every_replica_at_once() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::text(&["One."], (1, 1)),
        Reply::text(&["Two."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options::default();
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let config = |instruction: &str| {
        let mut request = run_request("unused", &[]);
        request.agent_mut().instruction = instruction.to_owned();
        request.agent
    };
    let mut on_a = AgentRegistryClient::new(channel(&a).await);
    let mut on_b = AgentRegistryClient::new(channel(&b).await);
    on_a.create_agent(pb::CreateAgentRequest {
        agent_id: "helper".into(),
        config: config("Version one."),
        ..Default::default()
    })
    .await
    .unwrap();
    let alias = |version: u32, expected: u32| pb::SetAliasRequest {
        agent_id: "helper".into(),
        alias: "prod".into(),
        version,
        expected_version: Some(expected),
    };
    on_a.set_alias(alias(1, 0)).await.unwrap();
    let by_alias = || pb::RunRequest {
        query: "hi".into(),
        agent_ref: Some(pb::AgentRef {
            agent_id: "helper".into(),
            version: 0,
            alias: "prod".into(),
        }),
        ..Default::default()
    };
    let version_run = |events: &[pb::RunEvent]| {
        events
            .iter()
            .find_map(|e| match &e.event {
                Some(Event::Started(started)) => Some(started.agent_version),
                _ => None,
            })
            .unwrap()
    };
    let first = crate::support::run_to_end(&mut client(&b).await, by_alias()).await;
    assert_eq!(version_run(&first), 1);
    on_b.create_agent_version(pb::CreateAgentVersionRequest {
        agent_id: "helper".into(),
        config: config("Version two."),
        client_tools: vec![],
    })
    .await
    .unwrap();
    on_b.set_alias(alias(2, 1)).await.unwrap();
    let stale = on_a.set_alias(alias(2, 1)).await.unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
    let second = crate::support::run_to_end(&mut client(&a).await, by_alias()).await;
    assert_eq!(version_run(&second), 2);
    assert!(llm.requests()[1]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("Version two."));
}

/// An A2A task started on one replica is followed, read and cancelled through another:
/// the subscriber there sees the task's answer grow and its cancel, and both replicas then
/// show it canceled.
#[tokio::test]
async fn an_a2a_task_is_reached_from_any_replica() {
    use agent_runner::a2a_pb as a2a;
    use agent_runner::a2a_pb::a2a_service_client::A2aServiceClient;

    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![slow(20, 150)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let on = Options {
        bus: bus.clone(),
        metrics: true,
        a2a: true,
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &on).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &on).await;
    let task_id = counting_task(&a).await;
    let mut on_a = A2aServiceClient::new(channel(&a).await);
    let mut on_b = A2aServiceClient::new(channel(&b).await);
    let mut followed = on_b
        .subscribe_to_task(a2a_call(a2a::SubscribeToTaskRequest {
            tenant: "counter".into(),
            id: task_id.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    let mut appended = 0;
    while appended < 3 {
        let response = followed.message().await.unwrap().unwrap();
        if matches!(
            response.payload,
            Some(a2a::stream_response::Payload::ArtifactUpdate(_))
        ) {
            appended += 1;
        }
    }
    let cancelled = on_b
        .cancel_task(a2a_call(a2a::CancelTaskRequest {
            tenant: "counter".into(),
            id: task_id.clone(),
            metadata: None,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        cancelled.status.unwrap().state,
        a2a::TaskState::Canceled as i32
    );
    let mut last = None;
    while let Some(response) = followed.message().await.unwrap() {
        last = response.payload;
    }
    let Some(a2a::stream_response::Payload::StatusUpdate(update)) = last else {
        panic!("the subscriber sees the end: {last:?}");
    };
    assert_eq!(
        update.status.unwrap().state,
        a2a::TaskState::Canceled as i32
    );
    let read = on_a
        .get_task(a2a_call(a2a::GetTaskRequest {
            tenant: "counter".into(),
            id: task_id.clone(),
            history_length: None,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.status.unwrap().state, a2a::TaskState::Canceled as i32);
}

/// The database falls silent under two replicas (their links stay open and answer
/// nothing): the followers on the peer, an `Attach` and an A2A `SubscribeToTask` of runs
/// held by the other replica, end `UNAVAILABLE` saying the database cannot be reached,
/// within `write_timeout_secs` + 5 s (here 2 + 5), as the owner's own streams do.
#[tokio::test]
async fn a_silent_database_ends_followers_on_a_peer_in_time() {
    use crate::support::postgres::{server_of, Proxy};
    use agent_runner::a2a_pb as a2a;
    use agent_runner::a2a_pb::a2a_service_client::A2aServiceClient;

    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let proxy = Proxy::start(server_of(&database.url())).await;
    let llm = FakeOpenAi::start(vec![slow(200, 50), slow(200, 50)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let on = Options {
        bus: bus.clone(),
        metrics: true,
        a2a: true,
        database_url: Some(proxy.url_through(&database.url())),
        edit: Some(|config: String| {
            config.replacen(
                "write_timeout_secs = 1\n",
                "write_timeout_secs = 2\nstatement_timeout_ms = 1000\n",
                1,
            )
        }),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &on).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &on).await;
    let mut run = client(&a)
        .await
        .run(run_request("Count.", &[]))
        .await
        .unwrap()
        .into_inner();
    let first = run.message().await.unwrap().unwrap();
    let mut attached = attach(&b, &first.message_id, 0).await;
    read_until(&mut attached, |e| matches!(e.event, Some(Event::Delta(_)))).await;

    let task_id = counting_task(&a).await;
    let mut subscribed = A2aServiceClient::new(channel(&b).await)
        .subscribe_to_task(a2a_call(a2a::SubscribeToTaskRequest {
            tenant: "counter".into(),
            id: task_id.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    loop {
        let response = subscribed.message().await.unwrap().unwrap();
        if matches!(
            response.payload,
            Some(a2a::stream_response::Payload::ArtifactUpdate(_))
        ) {
            break;
        }
    }

    proxy.stall();
    let silent = std::time::Instant::now();
    let attach_ended = tokio::time::timeout(Duration::from_secs(20), ending_of(&mut attached))
        .await
        .expect("the peer's Attach still open 20 s after");
    let attach_took = silent.elapsed();
    let subscription_ended =
        tokio::time::timeout(Duration::from_secs(20), ending_of(&mut subscribed))
            .await
            .expect("the peer's SubscribeToTask still open 20 s after");
    let subscription_took = silent.elapsed();
    println!(
        "peer Attach ended after {attach_took:?}, SubscribeToTask after {subscription_took:?}"
    );
    for (name, status) in [
        ("Attach", attach_ended),
        ("SubscribeToTask", subscription_ended),
    ] {
        says_the_database_cannot_be_reached(name, status);
    }
    assert!(
        subscription_took <= Duration::from_secs(7),
        "the peer's streams ended {attach_took:?} and {subscription_took:?} after"
    );
    proxy.restore();
}
