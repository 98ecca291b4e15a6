//! Agents that call stored agents: the child's events stream in place in the parent's,
//! its usage counts exactly, a cancel reaches it, its failure is a tool error, two run at
//! once, and cycles and depth past the limit are refused before anything starts.

use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::agent_registry_client::AgentRegistryClient;
use agent_runner::pb::run_event::Event;
use tonic::transport::Channel;
use tonic::Code;

use crate::support::{
    message, read_rest, run_request, run_to_end, start, thoughts, FakeOpenAi, Reply, RunRequestExt,
    ScriptedCall, TestServer,
};

type Library = AgentRegistryClient<Channel>;

/// Stores agent `id` on the scripted model with `instruction` and `sub_agents`.
pub(crate) async fn store_agent(
    library: &mut Library,
    id: &str,
    instruction: &str,
    sub_agents: &[&str],
) {
    let mut request = run_request("unused", &[]);
    let config = request.agent_mut();
    config.instruction = instruction.to_owned();
    config.sub_agents = sub_agents.iter().map(|id| sub_agent(id)).collect();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: id.into(),
            description: format!("The {id} agent."),
            config: Some(config.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn sub_agent(id: &str) -> pb::AgentRef {
    pb::AgentRef {
        agent_id: id.into(),
        ..Default::default()
    }
}

/// A run of an inline agent that may call `sub_agents`.
pub(crate) fn parent_request(query: &str, sub_agents: &[&str]) -> pb::RunRequest {
    let mut request = run_request(query, &[]);
    request.agent_mut().sub_agents = sub_agents.iter().map(|id| sub_agent(id)).collect();
    request
}

/// A call of stored agent `agent` with `input`.
pub(crate) fn ask(call_id: &'static str, agent: &'static str, input: &'static str) -> ScriptedCall {
    let arguments: &'static str = Box::leak(format!(r#"{{"input": "{input}"}}"#).into_boxed_str());
    ScriptedCall::new(call_id, agent, &[arguments])
}

/// The replies of a parent that asks `researcher` once for each of `inputs` (calls `c1`,
/// `c2` …), of its children answering `found` in turn, each after `delay_ms`, and of the
/// parent answering `answer` once it has read them.
pub(crate) fn asks_then_answers(
    inputs: &[&'static str],
    delay_ms: u64,
    found: &[&'static str],
    answer: &'static str,
) -> Vec<Reply> {
    let calls = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let id: &'static str = Box::leak(format!("c{}", i + 1).into_boxed_str());
            ask(id, "researcher", input)
        })
        .collect();
    let mut replies = vec![Reply::calls(&[], calls, (5, 2))];
    replies.extend(found.iter().map(|text| Reply::Late {
        delay_ms,
        text: vec![text],
    }));
    replies.push(Reply::text(&[answer], (5, 2)));
    replies
}

/// The sub-agents' events a parent's stream carried.
pub(crate) fn children(events: &[pb::RunEvent]) -> Vec<&pb::ChildEvent> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Child(child)) => Some(&**child),
            _ => None,
        })
        .collect()
}

/// The run's last event, which must be its end.
pub(crate) fn end(events: &[pb::RunEvent]) -> pb::MessageEnd {
    match events.last().and_then(|e| e.event.clone()) {
        Some(Event::End(end)) => end,
        other => panic!("the run did not end with `end`: {other:?}"),
    }
}

/// A sub-agent's events stream inside its parent's, and the parent's usage counts the
/// child's exactly once.
#[tokio::test]
async fn a_parent_streams_its_child_in_place_and_counts_its_usage_exactly() {
    let (llm, server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![ask("c1", "researcher", "capital of France?")],
            (10, 5),
        ),
        Reply::text(&["Par", "is."], (7, 3)),
        Reply::text(&["The capital is Paris."], (20, 6)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;

    let events = run_to_end(
        &mut agents,
        parent_request("What is the capital of France?", &["researcher"]),
    )
    .await;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let position = |wanted: fn(&Event) -> bool| {
        events
            .iter()
            .position(|e| e.event.as_ref().is_some_and(wanted))
            .unwrap()
    };
    let started = position(|e| matches!(e, Event::ToolStarted(_)));
    let finished = position(|e| matches!(e, Event::ToolFinished(_)));
    let wrapped = children(&events);
    assert!(!wrapped.is_empty());
    let first_child = position(|e| matches!(e, Event::Child(_)));
    assert!(started < first_child && first_child < finished);
    let child = wrapped[0];
    assert_eq!(
        (
            child.tool_call_id.as_str(),
            child.depth,
            child.agent_id.as_str()
        ),
        ("c1", 1, "researcher")
    );
    assert_eq!(child.agent_version, 1);
    let inner: Vec<&Event> = wrapped
        .iter()
        .filter_map(|c| c.event.as_ref().and_then(|e| e.event.as_ref()))
        .collect();
    assert!(matches!(inner.first(), Some(Event::Started(_))));
    assert!(matches!(inner.last(), Some(Event::End(_))));
    let child_text: String = inner
        .iter()
        .filter_map(|e| match e {
            Event::Delta(delta) => Some(delta.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(child_text, "Paris.");

    let Some(Event::ToolFinished(done)) = &events[finished].event else {
        unreachable!()
    };
    assert_eq!(done.tool_call.as_ref().unwrap().observation, "Paris.");
    let meta = done.tool_call.as_ref().unwrap().meta.clone().unwrap();
    assert_eq!(
        meta.usage.map(|usage| usage.total_tokens),
        Some(7 + 3),
        "the child's usage is on its call"
    );
    let total = end(&events).usage.unwrap();
    assert_eq!(total.total_tokens, 10 + 5 + 7 + 3 + 20 + 6, "{total:?}");

    let child_id = child.message_id.clone();
    let stored = message(&mut agents, child_id.clone()).await;
    assert_eq!(stored.parent_message_id, events[0].message_id);
    assert_eq!(
        (stored.parent_tool_call_id.as_str(), stored.depth),
        ("c1", 1)
    );
    assert_eq!(
        (stored.agent_id.as_str(), stored.agent_version),
        ("researcher", 1)
    );
    assert_eq!(stored.answer, "Paris.");
    assert_ne!(stored.conversation_id, events[0].conversation_id);
    assert_eq!(stored.usage.unwrap().total_tokens, 10);
    let parent = message(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(parent.usage.unwrap().total_tokens, 51);
    let today = chrono::Utc::now()
        .format("%Y%m%d")
        .to_string()
        .parse()
        .unwrap();
    let counted = server
        .store
        .tenant_tokens(&agent_runner::domain::Tenant::default_tenant(), today)
        .await
        .unwrap();
    assert_eq!(counted, 51, "each model call counts once for the tenant");
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(rounds[0].tool_calls[0].observation, "Paris.");

    let child_request = &llm.requests()[1];
    assert!(child_request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("You research."));
    assert_eq!(
        child_request["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"],
        "capital of France?"
    );
    let offered = &llm.requests()[0]["tools"][0]["function"];
    assert_eq!(offered["name"], "researcher");
    assert_eq!(offered["description"], "The researcher agent.");

    let mut replay = agents
        .attach(pb::AttachRequest {
            message_id: events[0].message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let replayed = read_rest(&mut replay).await;
    assert_eq!(
        children(&replayed).len(),
        wrapped.len(),
        "Attach replays them"
    );
}

/// A child run that fails becomes a tool error its parent's model reads; the parent goes
/// on.
#[tokio::test]
async fn a_child_that_fails_is_a_tool_error_the_parent_reads() {
    let (llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("c1", "flaky", "try")], (5, 2)),
        Reply::Error {
            status: 400,
            message: "the model refuses",
        },
        Reply::text(&["It failed."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "flaky", "You fail.", &[]).await;
    let events = run_to_end(&mut agents, parent_request("go", &["flaky"])).await;
    assert_eq!(end(&events).answer, "It failed.");
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    let observation = &rounds[0].tool_calls[0].observation;
    assert!(
        observation.starts_with("tool invoke error: the sub-agent failed: "),
        "{observation}"
    );
    let replayed = &llm.requests()[2]["messages"];
    assert!(replayed.to_string().contains("the sub-agent failed"));
}

/// Two sub-agent calls of one round run concurrently, not one after the other.
#[tokio::test]
async fn two_child_calls_of_one_round_run_at_once() {
    let (llm, server, mut agents) = start(asks_then_answers(
        &["first", "second"],
        600,
        &["One.", "Two."],
        "Both.",
    ))
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;
    let events = run_to_end(&mut agents, parent_request("go", &["researcher"])).await;
    assert_eq!(end(&events).answer, "Both.");
    let arrivals = llm.arrivals();
    let apart = arrivals[2].duration_since(arrivals[1]);
    assert!(
        apart < Duration::from_millis(400),
        "the second child started {apart:?} after the first: one waited for the other"
    );
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    let mut observations: Vec<&str> = rounds[0]
        .tool_calls
        .iter()
        .map(|c| c.observation.as_str())
        .collect();
    observations.sort_unstable();
    assert_eq!(observations, ["One.", "Two."]);
}

/// A model that numbers its calls per round (`call_0` every round, as local servers do),
/// or gives two calls of one round the same id, gets a child per call: each question gets
/// its own answer, never an earlier child's.
#[tokio::test]
async fn a_reused_call_id_starts_a_child_of_its_own() {
    let (_llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("call_0", "researcher", "France?")], (5, 2)),
        Reply::text(&["Paris."], (5, 2)),
        Reply::calls(&[], vec![ask("call_0", "researcher", "Italy?")], (5, 2)),
        Reply::text(&["Rome."], (5, 2)),
        Reply::calls(
            &[],
            vec![
                ask("call_0", "researcher", "Spain?"),
                ask("call_0", "researcher", "Spain?"),
            ],
            (5, 2),
        ),
        Reply::text(&["Madrid."], (5, 2)),
        Reply::text(&["Madrid, again."], (5, 2)),
        Reply::text(&["Paris, Rome, Madrid."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;
    let events = run_to_end(&mut agents, parent_request("capitals", &["researcher"])).await;
    assert_eq!(end(&events).answer, "Paris, Rome, Madrid.");
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    let observations = |round: usize| -> Vec<String> {
        let mut seen: Vec<String> = rounds[round]
            .tool_calls
            .iter()
            .map(|c| c.observation.clone())
            .collect();
        seen.sort_unstable();
        seen
    };
    assert_eq!(observations(0), ["Paris."]);
    assert_eq!(observations(1), ["Rome."], "not the first child's answer");
    assert_eq!(observations(2), ["Madrid, again.", "Madrid."]);
    let started: std::collections::HashSet<&str> = children(&events)
        .iter()
        .map(|c| c.message_id.as_str())
        .collect();
    assert_eq!(started.len(), 4, "a child per call");
}

/// Cancelling a parent cancels the child it is waiting on, so no child runs on unattended.
#[tokio::test]
async fn cancelling_the_parent_cancels_its_child() {
    let (_llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("c1", "slow", "think")], (5, 2)),
        Reply::Stall(vec!["Thinking"]),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "slow", "You take your time.", &[]).await;
    let mut stream = agents
        .run(parent_request("go", &["slow"]))
        .await
        .unwrap()
        .into_inner();
    let mut child_id = String::new();
    let mut parent_id = String::new();
    while let Some(event) = stream.message().await.unwrap() {
        parent_id.clone_from(&event.message_id);
        if let Some(Event::Child(child)) = &event.event {
            child_id.clone_from(&child.message_id);
            let delta = child
                .event
                .as_ref()
                .is_some_and(|e| matches!(e.event, Some(Event::Delta(_))));
            if delta {
                break;
            }
        }
    }
    agents
        .cancel(pb::CancelRequest {
            message_id: parent_id.clone(),
        })
        .await
        .unwrap();
    let rest = read_rest(&mut stream).await;
    assert!(matches!(
        rest.last().and_then(|e| e.event.as_ref()),
        Some(Event::End(end)) if end.finish_reason == pb::FinishReason::Cancelled as i32
    ));
    let mut status = 0;
    for _ in 0..100 {
        status = message(&mut agents, child_id.clone()).await.status;
        if status == pb::MessageStatus::Cancelled as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status,
        pb::MessageStatus::Cancelled as i32,
        "the child is cancelled too"
    );
}

/// An agent that reaches itself through other stored agents is stopped at run time instead
/// of recursing.
#[tokio::test]
async fn a_cycle_through_stored_agents_is_refused_at_run_time() {
    let (llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("c1", "beta", "ask alpha")], (5, 2)),
        Reply::calls(&[], vec![ask("c2", "alpha", "ask beta")], (5, 2)),
        Reply::text(&["I cannot ask alpha."], (5, 2)),
        Reply::text(&["Done."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "beta", "You are beta.", &[]).await;
    store_agent(&mut library, "alpha", "You are alpha.", &["beta"]).await;
    let mut cyclic = run_request("unused", &[]);
    cyclic.agent_mut().instruction = "You are beta, again.".into();
    cyclic.agent_mut().sub_agents = vec![sub_agent("alpha")];
    library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: "beta".into(),
            config: cyclic.agent.clone(),
            client_tools: vec![],
        })
        .await
        .unwrap();
    let run = pb::RunRequest {
        query: "go".into(),
        agent_ref: Some(sub_agent("alpha")),
        ..Default::default()
    };
    let events = run_to_end(&mut agents, run).await;
    assert_eq!(end(&events).answer, "Done.");
    assert_eq!(llm.requests().len(), 4, "no third agent started");
    let beta = children(&events)[0].message_id.clone();
    let rounds = thoughts(&mut agents, beta).await;
    let observation = &rounds[0].tool_calls[0].observation;
    assert!(
        observation.contains("agent_recursion: alpha is already running above this call"),
        "{observation}"
    );
}

/// A sub-agent call deeper than `runner.max_agent_depth` is refused as a tool error.
#[tokio::test]
async fn a_call_deeper_than_the_limit_is_refused() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(&[], vec![ask("c1", "middle", "go down")], (5, 2)),
        Reply::calls(&[], vec![ask("c2", "bottom", "go further")], (5, 2)),
        Reply::text(&["Too deep."], (5, 2)),
        Reply::text(&["Done."], (5, 2)),
    ])
    .await;
    let server =
        TestServer::start_edited(&llm.base_url(), |config| config.runner.max_agent_depth = 1).await;
    let mut library = server.library().await;
    store_agent(&mut library, "bottom", "You are the bottom.", &[]).await;
    store_agent(&mut library, "middle", "You are the middle.", &["bottom"]).await;
    let mut agents = server.agents().await;
    let events = run_to_end(&mut agents, parent_request("go", &["middle"])).await;
    assert_eq!(end(&events).answer, "Done.");
    let middle = children(&events)[0].message_id.clone();
    let rounds = thoughts(&mut agents, middle).await;
    let observation = &rounds[0].tool_calls[0].observation;
    assert!(
        observation.contains("max_depth: bottom would run at depth 2"),
        "{observation}"
    );
    assert_eq!(llm.requests().len(), 4);
}

/// A version that names its own agent, or an agent that does not exist, as a sub-agent is
/// refused when created.
#[tokio::test]
async fn a_version_may_not_name_its_own_agent_or_one_that_does_not_exist() {
    let (_llm, server, _agents) = start(vec![]).await;
    let mut library = server.library().await;
    store_agent(&mut library, "selfish", "Me.", &[]).await;
    let mut config = run_request("unused", &[]);
    config.agent_mut().sub_agents = vec![sub_agent("selfish")];
    let status = library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: "selfish".into(),
            config: config.agent.clone(),
            client_tools: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "config.sub_agents[0].agent_id names this agent itself; an agent cannot be its own sub-agent"
        )
    );
    config.agent_mut().sub_agents = vec![sub_agent("nobody")];
    let status = library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: "selfish".into(),
            config: config.agent.clone(),
            client_tools: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "config.sub_agents[0].agent_id names agent \"nobody\", which does not exist"
        )
    );
}

/// A child's pending approval shows on its parent's stream and is answered through the
/// parent's message.
#[tokio::test]
async fn a_childs_approval_shows_on_the_parent_and_is_answered_through_it() {
    let (llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("c1", "gated", "what is 6*7?")], (5, 2)),
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "m1",
                "eval_expression",
                &[r#"{"expression": "6*7"}"#],
            )],
            (5, 2),
        ),
        Reply::text(&["42."], (5, 2)),
        Reply::text(&["It is 42."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    let mut gated =
        run_request("unused", &[("maths", "eval_expression")]).needs_approval("eval_expression");
    gated.agent_mut().instruction = "You compute.".into();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "gated".into(),
            config: gated.agent.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut stream = agents
        .run(parent_request("go", &["gated"]))
        .await
        .unwrap()
        .into_inner();
    let (mut parent_id, mut child_id) = (String::new(), String::new());
    while let Some(event) = stream.message().await.unwrap() {
        parent_id.clone_from(&event.message_id);
        if let Some(Event::Child(child)) = &event.event {
            child_id.clone_from(&child.message_id);
            let asks = child
                .event
                .as_ref()
                .is_some_and(|e| matches!(e.event, Some(Event::ApprovalRequired(_))));
            if asks {
                break;
            }
        }
    }
    let parent = message(&mut agents, parent_id.clone()).await;
    assert_eq!(parent.status, pb::MessageStatus::WaitingApproval as i32);
    let child = message(&mut agents, child_id.clone()).await;
    assert_eq!(child.status, pb::MessageStatus::WaitingApproval as i32);

    let decide = |message_id: &str| pb::ApproveToolCallsRequest {
        message_id: parent_id.clone(),
        decisions: vec![pb::ToolCallDecision {
            tool_call_id: "m1".into(),
            approve: true,
            reason: String::new(),
            message_id: message_id.into(),
        }],
    };
    let stranger = agents
        .approve_tool_calls(decide(&parent_id.replace(&parent_id[..8], "00000000")))
        .await
        .unwrap_err();
    assert_eq!(stranger.code(), Code::InvalidArgument, "{stranger:?}");
    let own = agents.approve_tool_calls(decide("")).await.unwrap_err();
    assert_eq!(
        own.code(),
        Code::FailedPrecondition,
        "the parent itself waits on nothing"
    );
    agents.approve_tool_calls(decide(&child_id)).await.unwrap();

    let rest = read_rest(&mut stream).await;
    assert_eq!(end(&rest).answer, "It is 42.");
    let parent = message(&mut agents, parent_id).await;
    assert_eq!(parent.status, pb::MessageStatus::Completed as i32);
    assert_eq!(llm.requests().len(), 4);
    let rounds = thoughts(&mut agents, child_id).await;
    assert_eq!(rounds[0].tool_calls[0].observation, "42");
}

/// A sub-agent deleted after its caller's version was stored is a tool error the model
/// reads, not a failed run.
#[tokio::test]
async fn a_sub_agent_deleted_since_is_a_tool_error() {
    let (llm, server, mut agents) = start(vec![
        Reply::calls(&[], vec![ask("c1", "gone", "hello?")], (5, 2)),
        Reply::text(&["Nobody answered."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "gone", "You leave.", &[]).await;
    store_agent(&mut library, "caller", "You call gone.", &["gone"]).await;
    library
        .delete_agent(pb::DeleteAgentRequest {
            agent_id: "gone".into(),
        })
        .await
        .unwrap();
    let run = pb::RunRequest {
        query: "go".into(),
        agent_ref: Some(sub_agent("caller")),
        ..Default::default()
    };
    let events = run_to_end(&mut agents, run).await;
    assert_eq!(end(&events).answer, "Nobody answered.");
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(
        rounds[0].tool_calls[0].observation,
        "tool invoke error: agent_unavailable: agent gone not found"
    );
    assert_eq!(llm.requests().len(), 2, "no child started");
}

/// Deleting a conversation deletes the runs its messages' sub-agents made as well.
#[tokio::test]
async fn deleting_a_conversation_deletes_its_sub_agents_runs() {
    let (_llm, server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![ask("c1", "keeper", "remember the secret")],
            (5, 2),
        ),
        Reply::text(&["The secret is zebra-42."], (5, 2)),
        Reply::text(&["Noted."], (5, 2)),
    ])
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "keeper", "You keep secrets.", &[]).await;
    let events = run_to_end(&mut agents, parent_request("go", &["keeper"])).await;
    let child_id = children(&events)[0].message_id.clone();
    assert_eq!(
        message(&mut agents, child_id.clone()).await.answer,
        "The secret is zebra-42."
    );
    agents
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: events[0].conversation_id.clone(),
        })
        .await
        .unwrap();
    let gone = agents
        .get_message(pb::GetMessageRequest {
            message_id: child_id,
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let left = server.store.find_bytes(b"zebra-42").await.unwrap();
    assert!(left.is_empty(), "the child's records are gone: {left:?}");
}
