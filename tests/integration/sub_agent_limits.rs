//! A tree of agents within its bounds: children take no slot of their tenant's limits,
//! calls past the tree's bound or the tenant's child limit are tool errors at once (never
//! a wait), a round's children run under the tool concurrency, admission counts top-level
//! runs, and a 32 × 32 fan-out stays within every bound.

use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::run_event::Event;
use tonic::transport::Channel;
use tonic::Code;

use crate::sub_agents::{ask, asks_then_answers, children, end, parent_request, store_agent};
use crate::support::{run_request, run_to_end, thoughts, FakeOpenAi, Reply, TestServer};

/// Sub-agent runs take no slot of their tenant's concurrent-run or per-minute limits, so a
/// parent at the limit cannot starve its own children.
#[tokio::test]
async fn children_take_no_slot_of_their_tenants_limit() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(&[], vec![ask("c1", "researcher", "look")], (5, 2)),
        Reply::text(&["Found."], (5, 2)),
        Reply::text(&["Done."], (5, 2)),
    ])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_concurrent_runs = 1;
        config.limits.runs_per_minute = 1;
    })
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;
    let mut agents = server.agents().await;
    let events = run_to_end(&mut agents, parent_request("go", &["researcher"])).await;
    assert_eq!(
        end(&events).answer,
        "Done.",
        "the child ran within its parent's slot"
    );
    let rounds = thoughts(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(rounds[0].tool_calls[0].observation, "Found.");
}

/// Observations of the top run's first round, sorted.
async fn first_round_observations(
    agents: &mut AgentServiceClient<Channel>,
    events: &[pb::RunEvent],
) -> Vec<String> {
    let rounds = thoughts(agents, events[0].message_id.clone()).await;
    let mut observations: Vec<String> = rounds[0]
        .tool_calls
        .iter()
        .map(|c| c.observation.clone())
        .collect();
    observations.sort_unstable();
    observations
}

/// A server with `edit` made to its configuration, the `researcher` agent stored, and a
/// parent's run that may call it (asking `go`) run to its end on `replies`.
async fn researcher_run(
    replies: Vec<Reply>,
    edit: impl FnOnce(&mut agent_runner::config::Config),
) -> (
    FakeOpenAi,
    TestServer,
    AgentServiceClient<Channel>,
    Vec<pb::RunEvent>,
) {
    let llm = FakeOpenAi::start(replies).await;
    let server = TestServer::start_edited(&llm.base_url(), edit).await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;
    let mut agents = server.agents().await;
    let events = run_to_end(&mut agents, parent_request("go", &["researcher"])).await;
    (llm, server, agents, events)
}

/// A tree holds at most `runner.max_tree_runs` runs alive, its top run included: calls
/// past it start nothing and are the tool error `sub_agent_limit`, naming the setting, at
/// once (never a wait the tree could deadlock on); the others run and the parent answers.
#[tokio::test]
async fn calls_past_the_trees_bound_are_a_tool_error_not_a_wait() {
    let replies = asks_then_answers(
        &["one", "two", "three", "four"],
        300,
        &["Found.", "Found."],
        "Two of four.",
    );
    let (llm, _server, mut agents, events) = researcher_run(replies, |config| {
        config.runner.max_tree_runs = 3;
    })
    .await;
    assert_eq!(end(&events).answer, "Two of four.");
    let started: std::collections::HashSet<&str> = children(&events)
        .iter()
        .map(|c| c.message_id.as_str())
        .collect();
    assert_eq!(
        started.len(),
        2,
        "the top run and two children fill the tree"
    );
    let refusal = "tool invoke error: sub_agent_limit: the run's tree has 3 runs alive, the most \
                   runner.max_tree_runs (3) allows";
    assert_eq!(
        first_round_observations(&mut agents, &events).await,
        ["Found.", "Found.", refusal, refusal]
    );
    assert_eq!(llm.requests().len(), 4, "refused calls reached no model");
}

/// A round's sub-agent calls run under `runner.tool_concurrency` like other tools: with
/// one at a time, the second child starts only once the first has ended.
#[tokio::test]
async fn a_rounds_children_run_under_the_tool_concurrency() {
    let replies = asks_then_answers(&["one", "two"], 500, &["One.", "Two."], "Both.");
    let (llm, _server, mut agents, events) = researcher_run(replies, |config| {
        config.runner.tool_concurrency = 1;
    })
    .await;
    assert_eq!(end(&events).answer, "Both.");
    let arrivals = llm.arrivals();
    let apart = arrivals[2].duration_since(arrivals[1]);
    assert!(
        apart >= Duration::from_millis(450),
        "the second child started {apart:?} after the first, while it still ran"
    );
    assert_eq!(
        first_round_observations(&mut agents, &events).await,
        ["One.", "Two."]
    );
}

/// The tenant's `max_concurrent_child_runs` bounds its sub-agents' runs over all its
/// trees: a call past it is the tool error `sub_agent_limit`, naming the limit.
#[tokio::test]
async fn the_tenants_child_limit_refuses_a_child_past_it() {
    let replies = asks_then_answers(&["one", "two"], 300, &["One."], "Half.");
    let (_llm, _server, mut agents, events) = researcher_run(replies, |config| {
        config.limits.max_concurrent_child_runs = 1;
    })
    .await;
    assert_eq!(end(&events).answer, "Half.");
    assert_eq!(
        first_round_observations(&mut agents, &events).await,
        [
            "One.",
            "tool invoke error: sub_agent_limit: limits.max_concurrent_child_runs: the tenant \
             has 1 sub-agent runs in progress, the most it may have at once"
        ]
    );
}

/// Admission counts top-level runs only, as the docs say: a run with three children alive
/// holds one of the tenant's two slots, so a second top-level run starts, and a third is
/// refused naming two runs in progress (not five).
#[tokio::test]
async fn admission_counts_top_level_runs_not_their_children() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ask("c1", "researcher", "one"),
                ask("c2", "researcher", "two"),
                ask("c3", "researcher", "three"),
            ],
            (5, 2),
        ),
        Reply::Stall(vec!["Thinking"]),
        Reply::Stall(vec!["Thinking"]),
        Reply::Stall(vec!["Thinking"]),
        Reply::Stall(vec!["Second"]),
    ])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_concurrent_runs = 2;
    })
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "researcher", "You research.", &[]).await;
    let mut agents = server.agents().await;
    let mut parent = agents
        .run(parent_request("go", &["researcher"]))
        .await
        .unwrap()
        .into_inner();
    let mut writing = std::collections::HashSet::new();
    let mut parent_id = String::new();
    while writing.len() < 3 {
        let event = parent.message().await.unwrap().expect("the parent goes on");
        parent_id.clone_from(&event.message_id);
        if let Some(Event::Child(child)) = &event.event {
            if matches!(
                child.event.as_ref().and_then(|e| e.event.as_ref()),
                Some(Event::Delta(_))
            ) {
                writing.insert(child.message_id.clone());
            }
        }
    }
    let mut second = agents
        .run(run_request("another question", &[]))
        .await
        .expect("a second top-level run is admitted beside a tree of four runs")
        .into_inner();
    let first = second.message().await.unwrap().unwrap();
    let status = agents.run(run_request("a third", &[])).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status
            .message()
            .contains("the tenant has 2 runs in progress"),
        "{}",
        status.message()
    );
    for message_id in [first.message_id, parent_id] {
        agents
            .cancel(pb::CancelRequest { message_id })
            .await
            .unwrap();
    }
}

/// What the model answers in the 32 × 32 fan-out: a run offered `researcher` or `leaf`
/// calls it 32 times, then answers once the results are in; a leaf answers after a while.
fn fan_out(body: &serde_json::Value) -> Option<Reply> {
    let offered = |name: &str| {
        body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|tool| tool["function"]["name"] == name))
    };
    let answered = body["messages"]
        .as_array()
        .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool"));
    let callee = match (offered("researcher"), offered("leaf")) {
        _ if answered => return Some(Reply::text(&["Summed up."], (5, 2))),
        (true, _) => "researcher",
        (false, true) => "leaf",
        (false, false) => {
            return Some(Reply::Late {
                delay_ms: 200,
                text: vec!["A fact."],
            })
        }
    };
    let calls = (0..32)
        .map(|i| {
            let id: &'static str = Box::leak(format!("call_{i}").into_boxed_str());
            let input: &'static str = Box::leak(format!("part {i}").into_boxed_str());
            ask(id, callee, input)
        })
        .collect();
    Some(Reply::calls(&[], calls, (5, 2)))
}

/// The measured case: 32 sub-agent calls a round, two levels deep, for a tenant allowed one
/// run at a time, with the default bounds. The tree never holds more than
/// `runner.max_tree_runs` (32) runs alive, nor starts more than `max_tree_runs_total`
/// (256); calls past them are tool errors, and the top run still answers.
#[tokio::test]
async fn a_32_by_32_fan_out_stays_within_the_trees_bounds() {
    let llm = FakeOpenAi::start(Vec::new()).await;
    llm.route(fan_out);
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_concurrent_runs = 1;
    })
    .await;
    let mut library = server.library().await;
    store_agent(&mut library, "leaf", "You know one fact.", &[]).await;
    store_agent(&mut library, "researcher", "You research.", &["leaf"]).await;
    let metrics = format!("http://{}/metrics", server.metrics_addr);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watching = {
        let peak = std::sync::Arc::clone(&peak);
        tokio::spawn(async move {
            loop {
                let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
                let active = text
                    .lines()
                    .find_map(|line| line.strip_prefix("agent_runner_runs_active "))
                    .and_then(|value| value.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                peak.fetch_max(active, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let mut agents = server.agents().await;
    let events = tokio::time::timeout(
        Duration::from_secs(120),
        run_to_end(&mut agents, parent_request("go", &["researcher"])),
    )
    .await
    .expect("the tree ends in time");
    watching.abort();
    assert_eq!(end(&events).answer, "Summed up.");
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    let leaves = llm
        .requests()
        .iter()
        .filter(|body| body["tools"].as_array().is_none_or(Vec::is_empty))
        .count();
    println!("32 x 32 fan-out: at most {peak} runs alive, {leaves} leaves asked");
    assert!(peak <= 32, "{peak} runs of the tree alive at once");
    assert!(peak >= 16, "the tree ran wide: {peak}");
    assert!(leaves <= 256, "{leaves} leaves: more than the tree's total");
}
