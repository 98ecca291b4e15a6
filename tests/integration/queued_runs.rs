//! ENQUEUE: a run that arrives while its conversation has a live run is stored queued and
//! starts once the runs ahead of it have ended, with their questions and answers in its
//! prompt; while it waits it can be followed, cancelled, retried and timed out.

use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use tonic::Code;

use crate::support::conversation::{enqueued, slow_answer, streaming, turns};
use crate::support::{
    end_of, message, read_rest, replayed, run_request, run_to_end, start, Reply, TestServer,
};

/// The `queued` events of `events`: how many were ahead, and of which run.
fn queued_of(events: &[pb::RunEvent]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::Queued(queued)) => Some((queued.ahead, queued.message_id.clone())),
            _ => None,
        })
        .collect()
}

/// A run sent while another streams waits, says so (`queued` naming the run ahead, the
/// message QUEUED with `queued_behind`), then runs as any run once the first has ended:
/// its prompt holds the first run's question and answer, its events follow on from the
/// `queued` one without a gap, and Attach replays them all.
#[tokio::test]
async fn a_queued_run_starts_after_the_live_one_with_its_answer_in_the_prompt() {
    let (llm, _server, mut client) = start(vec![
        slow_answer(),
        Reply::text(&["Second answer."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = streaming(&mut client, run_request("First question?", &[])).await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());

    let mut second = client
        .run(enqueued("Second question?", &conversation))
        .await
        .unwrap()
        .into_inner();
    let queued = second.message().await.unwrap().expect("a first event");
    assert_eq!(
        queued_of(std::slice::from_ref(&queued)),
        [(1, live.clone())]
    );
    assert_eq!(queued.seq, 1);
    let waiting = message(&mut client, &queued.message_id).await;
    assert_eq!(waiting.status, pb::MessageStatus::Queued as i32);
    assert_eq!(waiting.queued_behind, live);
    assert_eq!(
        llm.requests().len(),
        1,
        "the queued run called no model yet"
    );
    let busy = client
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: conversation.clone(),
        })
        .await
        .expect_err("a queued run is live");
    assert_eq!(busy.code(), Code::FailedPrecondition, "{busy:?}");

    read_rest(&mut first).await;
    let rest = read_rest(&mut second).await;
    assert!(
        matches!(rest[0].event, Some(Event::Started(_))),
        "it starts as any run: {:?}",
        rest[0]
    );
    assert_eq!(end_of(&rest).answer, "Second answer.");
    let seqs: Vec<u64> = std::iter::once(&queued)
        .chain(&rest)
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    let requests = llm.requests();
    assert_eq!(
        turns(&requests[1], "user"),
        ["First question?", "Second question?"]
    );
    assert_eq!(
        turns(&requests[1], "assistant"),
        ["slow answer still going"]
    );
    let ended = message(&mut client, &queued.message_id).await;
    assert_eq!(ended.status, pb::MessageStatus::Completed as i32);
    assert_eq!(ended.queued_behind, "", "no longer queued");
    let again = replayed(&mut client, &queued.message_id).await;
    assert_eq!(
        again.len(),
        seqs.len(),
        "Attach replays the queued event too"
    );
}

/// Three runs queued behind one: each waits behind the one before it, is told when fewer
/// are ahead, and they run one at a time in arrival order, each prompt holding every
/// earlier answer.
#[tokio::test]
async fn queued_runs_run_one_at_a_time_in_arrival_order() {
    let (llm, _server, mut client) = start(vec![
        slow_answer(),
        Reply::text(&["Two."], (1, 1)),
        Reply::text(&["Three."], (1, 1)),
        Reply::text(&["Four."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = streaming(&mut client, run_request("One?", &[])).await;
    let conversation = seen[0].conversation_id.clone();
    let mut streams = Vec::new();
    for query in ["Two?", "Three?", "Four?"] {
        let mut stream = client
            .run(enqueued(query, &conversation))
            .await
            .unwrap()
            .into_inner();
        let queued = stream.message().await.unwrap().expect("queued");
        streams.push((queued, stream));
    }
    let ids: Vec<String> = std::iter::once(seen[0].message_id.clone())
        .chain(streams.iter().map(|(queued, _)| queued.message_id.clone()))
        .collect();
    let mut endings = Vec::new();
    for (index, (queued, mut stream)) in streams.into_iter().enumerate() {
        let mut events = vec![queued];
        events.extend(read_rest(&mut stream).await);
        let told = queued_of(&events);
        assert_eq!(told[0], (index as u32 + 1, ids[index].clone()), "{told:?}");
        let counts: Vec<u32> = told.iter().map(|(ahead, _)| *ahead).collect();
        assert!(
            counts.windows(2).all(|pair| pair[1] < pair[0]),
            "told again as fewer are ahead: {counts:?}"
        );
        endings.push(end_of(&events).answer);
    }
    read_rest(&mut first).await;
    assert_eq!(endings, ["Two.", "Three.", "Four."]);
    let requests = llm.requests();
    assert_eq!(
        turns(&requests[3], "user"),
        ["One?", "Two?", "Three?", "Four?"]
    );
    assert_eq!(
        turns(&requests[3], "assistant"),
        ["slow answer still going", "Two.", "Three."]
    );
}

/// A queued run cancelled ends CANCELLED without starting (no model call, no `started`),
/// and the runs behind it move up; one whose caller's deadline passes while it waits, and
/// one whose caller leaves with `cancel_on_disconnect`, end the same way; a retry with its
/// idempotency key follows it.
#[tokio::test]
async fn a_queued_run_is_cancelled_timed_out_and_retried_like_any_run() {
    let (llm, _server, mut client) = start(vec![
        slow_answer(),
        Reply::text(&["After the cancelled one."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = streaming(&mut client, run_request("First?", &[])).await;
    let conversation = seen[0].conversation_id.clone();

    let mut keyed = enqueued("Cancel me?", &conversation);
    keyed.idempotency_key = "queued-once".into();
    let mut doomed = client.run(keyed.clone()).await.unwrap().into_inner();
    let queued = doomed.message().await.unwrap().expect("queued");
    let mut retried = client.run(keyed).await.unwrap().into_inner();
    let followed = retried
        .message()
        .await
        .unwrap()
        .expect("the retry's first event");
    assert_eq!(
        followed.message_id, queued.message_id,
        "the retry follows it"
    );

    let mut timed = tonic::Request::new(enqueued("Too late?", &conversation));
    timed.set_timeout(Duration::from_millis(300));
    let mut late = client.run(timed).await.unwrap().into_inner();
    let late_queued = late.message().await.unwrap().expect("queued");
    let mut behind = client
        .run(enqueued("Behind them?", &conversation))
        .await
        .unwrap()
        .into_inner();
    let behind_queued = behind.message().await.unwrap().expect("queued");
    assert_eq!(queued_of(std::slice::from_ref(&behind_queued))[0].0, 3);
    let mut leaving = enqueued("Leaving?", &conversation);
    leaving.cancel_on_disconnect = true;
    let mut left = client.run(leaving).await.unwrap().into_inner();
    let left_queued = left.message().await.unwrap().expect("queued");
    drop(left);

    let cancelled = client
        .cancel(pb::CancelRequest {
            message_id: queued.message_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    let rest = read_rest(&mut doomed).await;
    assert!(rest
        .iter()
        .all(|e| !matches!(e.event, Some(Event::Started(_)))));
    assert_eq!(
        end_of(&rest).finish_reason,
        pb::FinishReason::Cancelled as i32
    );
    for (gone, why) in [
        (&late_queued, "its deadline passed"),
        (&left_queued, "its caller left"),
    ] {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let now = message(&mut client.clone(), &gone.message_id).await;
                if now.status == pb::MessageStatus::Cancelled as i32 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("cancelled as {why}"));
    }

    read_rest(&mut first).await;
    let events = read_rest(&mut behind).await;
    assert_eq!(end_of(&events).answer, "After the cancelled one.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "no cancelled run called a model");
    assert_eq!(turns(&requests[1], "user"), ["First?", "Behind them?"]);
}

/// Past `limits.max_queued_per_conversation` a queued run is refused RESOURCE_EXHAUSTED
/// naming it; an unknown policy value is refused naming its field.
#[tokio::test]
async fn the_queue_of_a_conversation_is_bounded() {
    let llm = crate::support::FakeOpenAi::start(vec![slow_answer()]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_queued_per_conversation = 2;
    })
    .await;
    let mut client = server.agents().await;
    let (_first, seen) = streaming(&mut client, run_request("First?", &[])).await;
    let conversation = seen[0].conversation_id.clone();
    let mut held = Vec::new();
    for query in ["A?", "B?"] {
        let mut stream = client
            .run(enqueued(query, &conversation))
            .await
            .unwrap()
            .into_inner();
        stream.message().await.unwrap().expect("queued");
        held.push(stream);
    }
    let refused = client
        .run(enqueued("C?", &conversation))
        .await
        .expect_err("a third is one too many");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("limits.max_queued_per_conversation"),
        "{refused:?}"
    );
}

/// An agent whose policy is ENQUEUE queues its runs when the request sets none.
#[tokio::test]
async fn an_agents_policy_queues_its_runs() {
    let (_llm, _server, mut client) = start(vec![
        slow_answer(),
        Reply::text(&["Queued by the agent."], (1, 1)),
    ])
    .await;
    let (_first, seen) = streaming(&mut client, run_request("First?", &[])).await;
    let mut request = run_request("Second?", &[]);
    request.conversation_id = seen[0].conversation_id.clone();
    request.agent.as_mut().unwrap().conversation_policy = pb::ConversationPolicy::Enqueue.into();
    let events = run_to_end(&mut client, request).await;
    assert_eq!(queued_of(&events), [(1, seen[0].message_id.clone())]);
    assert_eq!(end_of(&events).answer, "Queued by the agent.");
}

/// 100 ENQUEUE runs sent at once by 10 clients into one conversation (its queue may hold
/// 100), across a `kill -9` of the service while they run and its restart on the same
/// data: none is lost, they ran one at a time in the order the store placed them, and each
/// prompt holds every earlier question and answer.
#[tokio::test]
async fn a_hundred_queued_runs_from_ten_clients_run_in_order_across_a_kill() {
    use crate::support::hundred::{
        all_completed, answer_each_query, answered, queue_a_hundred, ran_one_at_a_time_in_order,
        send_a_hundred,
    };
    use crate::support::process::{client, spawn_service_edited};

    let llm = crate::support::FakeOpenAi::start(Vec::new()).await;
    answer_each_query(&llm);
    let dir = tempfile::tempdir().unwrap();
    let mut service = spawn_service_edited(dir.path(), &llm, None, queue_a_hundred).await;
    let opening = run_to_end(&mut client(&service).await, run_request("Q0", &[])).await;
    let conversation = opening[0].conversation_id.clone();
    send_a_hundred(&[service.addr], &conversation).await;
    answered(&llm, 30).await;
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    assert!(
        llm.requests().len() < 80,
        "runs were still queued at the kill"
    );

    let service = spawn_service_edited(dir.path(), &llm, None, queue_a_hundred).await;
    let messages = all_completed(&mut client(&service).await, &conversation).await;
    ran_one_at_a_time_in_order(&messages, &llm);
}

/// With `max_concurrent_runs = 1`, a run queued behind the tenant's one running run is
/// queued, not refused, and takes no slot while it waits; a run that would start at once
/// elsewhere is refused; once the first ends, the queued one starts.
#[tokio::test]
async fn a_queued_run_takes_no_slot_until_it_starts() {
    let llm = crate::support::FakeOpenAi::start(vec![
        slow_answer(),
        Reply::text(&["In its turn."], (1, 1)),
    ])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_concurrent_runs = 1;
    })
    .await;
    let mut client = server.agents().await;
    let (mut first, seen) = streaming(&mut client, run_request("First?", &[])).await;
    let mut queued = client
        .run(enqueued("Second?", &seen[0].conversation_id))
        .await
        .expect("queued, not refused")
        .into_inner();
    let refused = client
        .run(run_request("Elsewhere?", &[]))
        .await
        .expect_err("the tenant's one slot is taken");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().starts_with("limits.max_concurrent_runs"),
        "{refused:?}"
    );
    read_rest(&mut first).await;
    let events = read_rest(&mut queued).await;
    assert_eq!(end_of(&events).answer, "In its turn.");
}
