//! The model's reasoning, as its agent asks: under STREAM `reasoning_delta` events with
//! `seq` 0 reach the caller and are never stored; under KEEP they are events like any other
//! and the text stays on the thought; otherwise (unset, OFF) nothing of it is shown or
//! kept. It is never answer text, and an operator can forbid keeping it.

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::{
    end_of, replayed, run_request, run_to_end, start, streamed_text, thoughts, Reply, TestServer,
};

const REASONING: [&str; 3] = ["The user is in ", "Paris, so ", "UTC+1."];

fn thinking_model() -> Vec<Reply> {
    vec![Reply::Reasoning {
        reasoning: REASONING.to_vec(),
        text: vec!["It is ", "11:00."],
        delay_ms: 0,
    }]
}

fn asking(mode: pb::Reasoning) -> pb::RunRequest {
    let mut request = run_request("What time is it?", &[]);
    if let Some(agent) = request.agent.as_mut() {
        agent.reasoning = mode.into();
    }
    request
}

/// The reasoning events of a stream, with their `seq`.
fn reasoning_of(events: &[pb::RunEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::ReasoningDelta(delta)) => Some((event.seq, delta.text.clone())),
            _ => None,
        })
        .collect()
}

/// STREAM: the caller watches the reasoning as it is written, outside the log: `seq` 0,
/// the stored events still numbered 1, 2, 3 … without a gap, nothing replayed by Attach,
/// nothing on the thought; the answer is the answer alone.
#[tokio::test]
async fn streamed_reasoning_reaches_the_caller_and_is_never_stored() {
    let (_llm, _server, mut agents) = start(thinking_model()).await;
    let events = run_to_end(&mut agents, asking(pb::Reasoning::Stream)).await;
    let reasoning = reasoning_of(&events);
    assert!(reasoning.iter().all(|(seq, _)| *seq == 0), "{reasoning:?}");
    let text: String = reasoning.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(text, REASONING.concat());
    assert_eq!(end_of(&events).answer, "It is 11:00.");
    assert_eq!(streamed_text(&events), "It is 11:00.");
    let stored: Vec<u64> = events
        .iter()
        .map(|e| e.seq)
        .filter(|seq| *seq > 0)
        .collect();
    assert_eq!(stored, (1..=stored.len() as u64).collect::<Vec<_>>());

    let message_id = events[0].message_id.clone();
    let again = replayed(&mut agents, &message_id).await;
    assert!(reasoning_of(&again).is_empty(), "Attach replays none");
    assert_eq!(again.len(), stored.len());
    let kept = thoughts(&mut agents, message_id).await;
    assert!(kept.iter().all(|thought| thought.reasoning.is_empty()));
}

/// KEEP: reasoning events are stored and replayed like any other, and the thought keeps
/// the text.
#[tokio::test]
async fn kept_reasoning_is_replayed_and_stays_on_the_thought() {
    let (_llm, _server, mut agents) = start(thinking_model()).await;
    let events = run_to_end(&mut agents, asking(pb::Reasoning::Keep)).await;
    let reasoning = reasoning_of(&events);
    assert!(reasoning.iter().all(|(seq, _)| *seq > 0), "{reasoning:?}");
    let text: String = reasoning.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(text, REASONING.concat());
    assert_eq!(end_of(&events).answer, "It is 11:00.");
    let message_id = events[0].message_id.clone();
    assert_eq!(replayed(&mut agents, &message_id).await, events);
    let kept = thoughts(&mut agents, message_id).await;
    assert_eq!(kept[0].reasoning, REASONING.concat());
    assert_eq!(kept[0].thought, "It is 11:00.");
}

/// Unset (and OFF): the caller sees none of it and nothing keeps it; the answer is the same.
#[tokio::test]
async fn reasoning_not_asked_for_is_neither_shown_nor_kept() {
    for mode in [pb::Reasoning::Unspecified, pb::Reasoning::Off] {
        let (_llm, _server, mut agents) = start(thinking_model()).await;
        let events = run_to_end(&mut agents, asking(mode)).await;
        assert!(reasoning_of(&events).is_empty());
        assert_eq!(end_of(&events).answer, "It is 11:00.");
        let kept = thoughts(&mut agents, events[0].message_id.clone()).await;
        assert!(kept[0].reasoning.is_empty());
    }
}

/// A model on a server without a reasoning parser opens its answer with `<think>…</think>`:
/// that is reasoning, streamed when asked, and never part of the answer.
#[tokio::test]
async fn an_answer_opening_with_a_think_block_streams_it_as_reasoning() {
    let (_llm, _server, mut agents) = start(vec![
        Reply::text(
            &[
                "<think>Paris, so ",
                "UTC+1.</thi",
                "nk>\n\nIt is ",
                "11:00.",
            ],
            (5, 5),
        ),
        Reply::text(&["<think>again</think>It is 11:00."], (5, 5)),
    ])
    .await;
    let events = run_to_end(&mut agents, asking(pb::Reasoning::Stream)).await;
    let text: String = reasoning_of(&events).into_iter().map(|(_, t)| t).collect();
    assert_eq!(text, "Paris, so UTC+1.");
    assert_eq!(end_of(&events).answer, "It is 11:00.");
    let quiet = run_to_end(&mut agents, run_request("And now?", &[])).await;
    assert!(reasoning_of(&quiet).is_empty());
    assert_eq!(end_of(&quiet).answer, "It is 11:00.");
}

/// An operator who must not store reasoning sets `runner.allow_keep_reasoning = false`:
/// KEEP is then refused before anything runs, naming the field; STREAM still runs.
#[tokio::test]
async fn keeping_reasoning_is_refused_where_the_operator_forbids_it() {
    let llm = crate::support::FakeOpenAi::start(thinking_model()).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.allow_keep_reasoning = false;
    })
    .await;
    let mut agents = server.agents().await;
    let Err(refused) = agents.run(asking(pb::Reasoning::Keep)).await else {
        panic!("KEEP is refused");
    };
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().starts_with("agent.reasoning"),
        "{}",
        refused.message()
    );
    assert!(llm.requests().is_empty(), "the model was not called");
    let events = run_to_end(&mut agents, asking(pb::Reasoning::Stream)).await;
    let text: String = reasoning_of(&events).into_iter().map(|(_, t)| t).collect();
    assert_eq!(text, REASONING.concat(), "STREAM still shows it");
}

/// A reasoning value outside the enum is refused naming `agent.reasoning`, before the
/// model is called.
#[tokio::test]
async fn an_unknown_reasoning_value_is_refused_naming_its_field() {
    let (llm, _server, mut agents) = start(thinking_model()).await;
    let mut request = asking(pb::Reasoning::Unspecified);
    request.agent.as_mut().unwrap().reasoning = 7;
    let refused = agents.run(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(refused.message(), "agent.reasoning has unknown value 7");
    assert!(llm.requests().is_empty(), "the model was not called");
}

/// STREAM across replicas, over NATS and over the database's notifications (sealed): a
/// client following the run on a peer sees the reasoning as the owner's caller does, `seq`
/// 0 and outside the log, and the stored events still arrive gap-free.
async fn streamed_to_a_peer(bus: &crate::support::replicas::Bus) {
    use crate::support::postgres::TestDatabase;
    use crate::support::replicas::{attach, replica_on, Options};

    let Some(database) = TestDatabase::create().await else {
        return;
    };
    // Sixteen pieces 150 ms apart: a peer that joins within 1.8 s (a loaded machine's
    // attach took over 0.6 s) still sees four of them.
    const PIECES: [&str; 16] = [
        "r1 ", "r2 ", "r3 ", "r4 ", "r5 ", "r6 ", "r7 ", "r8 ", "r9 ", "r10 ", "r11 ", "r12 ",
        "r13 ", "r14 ", "r15 ", "r16 ",
    ];
    let llm = crate::support::FakeOpenAi::start(vec![Reply::Reasoning {
        reasoning: PIECES.to_vec(),
        text: vec!["Done."],
        delay_ms: 150,
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let mut owner = crate::support::process::client(&a).await;
    let mut on_a = owner
        .run(asking(pb::Reasoning::Stream))
        .await
        .unwrap()
        .into_inner();
    let first = on_a.message().await.unwrap().unwrap();
    let mut on_b = attach(&b, &first.message_id, 0).await;
    let mut seen_on_b = Vec::new();
    while let Some(event) = on_b.message().await.unwrap() {
        seen_on_b.push(event);
    }
    let mut seen_on_a = vec![first];
    while let Some(event) = on_a.message().await.unwrap() {
        seen_on_a.push(event);
    }
    let full: String = reasoning_of(&seen_on_a)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(full, PIECES.concat());
    let on_peer = reasoning_of(&seen_on_b);
    assert!(on_peer.len() >= 4, "the peer's follower saw {on_peer:?}");
    assert!(on_peer.iter().all(|(seq, _)| *seq == 0));
    let peer_text: String = on_peer.into_iter().map(|(_, t)| t).collect();
    assert!(full.ends_with(&peer_text), "{peer_text:?} of {full:?}");
    let stored: Vec<u64> = seen_on_b.iter().map(|e| e.seq).filter(|s| *s > 0).collect();
    assert_eq!(stored, (1..=stored.len() as u64).collect::<Vec<_>>());
    assert_eq!(end_of(&seen_on_b).answer, "Done.");
}

use crate::support::replicas::{nats_bus, on_both_buses, Bus, TURN};
on_both_buses!(streamed_to_a_peer: streamed_reasoning_reaches_followers_on_a_peer_over_nats, streamed_reasoning_reaches_followers_on_a_peer_without_nats);
