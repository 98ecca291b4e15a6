//! Run budgets on the scripted model: each kind ends a run (normally, with a last round for
//! an answer, or with an error) with its usage; a model call is paid for before it is made;
//! the tenant's ceiling holds; a parent and its sub-agent share one budget.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use tonic::Code;

use crate::support::{
    end_of, final_thoughts, last_error, message, run_request, run_to_end, start, FakeOpenAi, Reply,
    RunRequestExt, ScriptedCall, TestServer, BLOCKING_MODEL, PROVIDER,
};

fn budget(edit: impl FnOnce(&mut pb::Budget)) -> Option<pb::Budget> {
    let mut budget = pb::Budget::default();
    edit(&mut budget);
    Some(budget)
}

fn with_budget(mut request: pb::RunRequest, budget: Option<pb::Budget>) -> pb::RunRequest {
    request.agent_mut().budget = budget;
    request
}

fn time_call(id: &'static str) -> ScriptedCall {
    ScriptedCall::new(id, "current_time", &[r#"{"timezone": "UTC"}"#])
}

fn time_request(query: &str) -> pb::RunRequest {
    run_request(query, &[("time", "current_time")])
}

fn max_tokens_sent(llm: &FakeOpenAi, n: usize) -> u64 {
    llm.requests()[n]["max_tokens"].as_u64().unwrap_or(0)
}

/// A budget of N tool calls runs exactly N: the round's other calls get an observation
/// saying why they were not made, and the run ends normally, naming the budget.
#[tokio::test]
async fn exactly_n_tool_calls_run_with_a_budget_of_n() {
    let (llm, server, mut client) = start(vec![Reply::calls(
        &["Checking."],
        vec![time_call("c1"), time_call("c2"), time_call("c3")],
        (20, 10),
    )])
    .await;
    let request = with_budget(
        time_request("Time, three times?"),
        budget(|b| b.max_tool_calls = Some(2)),
    );
    let events = run_to_end(&mut client, request).await;

    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "tool_calls");
    assert_eq!(end.answer, "Checking.");
    assert_eq!(end.usage.as_ref().unwrap().total_tokens, 30);
    let calls = &final_thoughts(&events)[0].tool_calls;
    let observations: Vec<&str> = calls.iter().map(|c| c.observation.as_str()).collect();
    assert_ne!(observations[0], observations[2]);
    assert!(!observations[0].starts_with("not run"));
    assert!(!observations[1].starts_with("not run"));
    assert_eq!(
        observations[2],
        "not run: the run's tool-call budget (2) is spent"
    );
    assert_eq!(
        llm.requests().len(),
        1,
        "no model call after the budget ran out"
    );
    let stored = message(&mut client, &events[0].message_id).await;
    assert_eq!(stored.status, pb::MessageStatus::Completed as i32);
    assert_eq!(stored.budget_exhausted, "tool_calls");
    drop(server);
}

/// ReAct makes one call a round: with a budget of one the second round's call is not made.
#[tokio::test]
async fn react_runs_stop_at_their_tool_call_budget_too() {
    let action = |expression: &'static str| {
        Reply::text(
            &[
                "Thought: calculate.\nAction:\n```json\n{\"action\": \"eval_expression\", ",
                expression,
            ],
            (30, 10),
        )
    };
    let (llm, _server, mut client) = start(vec![
        action("\"action_input\": {\"expression\": \"6*7\"}}\n```"),
        action("\"action_input\": {\"expression\": \"6*8\"}}\n```"),
    ])
    .await;
    let request = with_budget(
        run_request(
            "6 times 7, then 6 times 8?",
            &[("maths", "eval_expression")],
        )
        .strategy(pb::Strategy::ChainOfThought),
        budget(|b| b.max_tool_calls = Some(1)),
    );
    let events = run_to_end(&mut client, request).await;

    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "tool_calls");
    let thoughts = final_thoughts(&events);
    assert_eq!(thoughts[0].tool_calls[0].observation, "42");
    assert_eq!(
        thoughts[1].tool_calls[0].observation,
        "not run: the run's tool-call budget (1) is spent"
    );
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(end.usage.unwrap().total_tokens, 80);
}

/// A token budget lowers each call's `max_tokens` so its worst case fits, and stops the run
/// before a call whose prompt it cannot pay: the end carries the answer so far and usage.
#[tokio::test]
async fn a_token_budget_clamps_each_call_and_stops_before_one_it_cannot_pay() {
    let (llm, _server, mut client) = start(vec![Reply::calls(
        &["Let me look."],
        vec![time_call("c1")],
        (300, 50),
    )])
    .await;
    let request = with_budget(
        time_request("What time is it?"),
        budget(|b| b.max_tokens = Some(400)),
    );
    let events = run_to_end(&mut client, request).await;

    let sent = max_tokens_sent(&llm, 0);
    assert!(
        sent > 16 && sent < 400,
        "max_tokens {sent} leaves room for the prompt"
    );
    assert_eq!(
        llm.requests().len(),
        1,
        "50 tokens left cannot pay the next prompt"
    );
    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "tokens");
    assert_eq!(end.answer, "Let me look.");
    assert_eq!(end.usage.unwrap().total_tokens, 350);
}

/// A priced model (1 per million in, 2 out) with a cost budget: the first call's
/// `max_tokens` is what the budget can pay after the prompt, and the run stops before a
/// call it cannot pay; the reported price is the exact decimal sum.
#[tokio::test]
async fn a_cost_budget_stops_before_a_call_it_cannot_pay() {
    let (llm, _server, mut client) =
        start(vec![Reply::calls(&[], vec![time_call("c1")], (300, 50))]).await;
    let request = with_budget(
        time_request("What time is it?"),
        budget(|b| b.max_cost = "0.0004".into()),
    );
    let events = run_to_end(&mut client, request).await;

    // 0.0004 less a prompt of p tokens at 0.000001 buys (400 - p) / 2 tokens at 0.000002.
    let sent = max_tokens_sent(&llm, 0);
    assert!(sent > 16 && sent < 200, "max_tokens {sent}");
    assert_eq!(llm.requests().len(), 1);
    let end = end_of(&events);
    assert_eq!(end.budget_exhausted, "cost");
    let usage = end.usage.unwrap();
    assert_eq!(usage.total_price.trim_end_matches('0'), "0.0004");
    assert_eq!(usage.currency, "USD");
}

/// The wall clock stops a model call in flight: a model that would take seconds ends the
/// run within its one second and half a second more.
#[tokio::test]
async fn the_wall_clock_ends_a_slow_model_in_time() {
    let (_llm, _server, mut client) = start(vec![Reply::Slow {
        text: vec!["one ", "two ", "three ", "four"],
        delay_ms: 2_000,
    }])
    .await;
    let request = with_budget(
        run_request("Count slowly.", &[]),
        budget(|b| b.max_seconds = Some(1)),
    );
    let started = Instant::now();
    let events = run_to_end(&mut client, request).await;
    let took = started.elapsed();

    assert!(took < Duration::from_millis(1_500), "took {took:?}");
    assert!(took >= Duration::from_millis(950), "took {took:?}");
    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "wall_clock");
    let stored = message(&mut client, &events[0].message_id).await;
    assert_eq!(stored.status, pb::MessageStatus::Completed as i32);
}

/// Waiting for an approval is not running time: a run with one second of budget waits
/// longer than that for its approval and still finishes.
#[tokio::test]
async fn waits_for_approval_do_not_count_against_the_wall_clock() {
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(&[], vec![time_call("c1")], (10, 5)),
        Reply::text(&["It is noon."], (20, 5)),
    ])
    .await;
    let request = with_budget(
        time_request("What time is it?").needs_approval("current_time"),
        budget(|b| b.max_seconds = Some(1)),
    );
    let mut stream = client.run(request).await.unwrap().into_inner();
    let mut message_id = String::new();
    while let Some(event) = stream.message().await.unwrap() {
        message_id.clone_from(&event.message_id);
        if matches!(event.event, Some(Event::ApprovalRequired(_))) {
            break;
        }
    }
    // Time spent waiting on the caller, which the wall-clock budget must not count.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    client
        .approve_tool_calls(pb::ApproveToolCallsRequest {
            message_id: message_id.clone(),
            decisions: vec![pb::ToolCallDecision {
                tool_call_id: "c1".into(),
                approve: true,
                ..Default::default()
            }],
        })
        .await
        .unwrap();
    let mut last = None;
    while let Some(event) = stream.message().await.unwrap() {
        last = event.event;
    }
    match last {
        Some(Event::End(end)) => {
            assert_eq!(end.finish_reason, pb::FinishReason::Stop as i32);
            assert_eq!(end.answer, "It is noon.");
        }
        other => panic!("the run did not end normally: {other:?}"),
    }
}

/// `FINAL_ANSWER` runs one more round, without tools, for an answer from what was found.
#[tokio::test]
async fn final_answer_asks_once_more_without_tools() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(&[], vec![time_call("c1"), time_call("c2")], (20, 10)),
        Reply::text(&["It is noon, as far as I got."], (40, 10)),
    ])
    .await;
    let request = with_budget(
        time_request("Time twice?"),
        budget(|b| {
            b.max_tool_calls = Some(1);
            b.on_exhausted = pb::OnExhausted::FinalAnswer as i32;
        }),
    );
    let events = run_to_end(&mut client, request).await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].get("tools").is_some());
    assert!(
        requests[1].get("tools").is_none(),
        "the last round offers no tools"
    );
    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "tool_calls");
    assert_eq!(end.answer, "It is noon, as far as I got.");
    assert_eq!(end.usage.unwrap().total_tokens, 80);
}

/// `ERROR` ends with an `error` of code `budget_exhausted` carrying the usage; the message
/// fails and names the budget.
#[tokio::test]
async fn error_ends_the_run_failed_with_its_usage() {
    let (_llm, _server, mut client) =
        start(vec![Reply::calls(&[], vec![time_call("c1")], (300, 50))]).await;
    let request = with_budget(
        time_request("What time is it?"),
        budget(|b| {
            b.max_tokens = Some(400);
            b.on_exhausted = pb::OnExhausted::Error as i32;
        }),
    );
    let events = run_to_end(&mut client, request).await;

    let error = last_error(&events);
    assert_eq!(error.code, "budget_exhausted");
    assert!(
        error.message.contains("token budget (400)"),
        "{}",
        error.message
    );
    assert_eq!(error.usage.unwrap().total_tokens, 350);
    let stored = message(&mut client, &events[0].message_id).await;
    assert_eq!(stored.status, pb::MessageStatus::Failed as i32);
    assert_eq!(stored.budget_exhausted, "tokens");
}

/// `[limits] max_run_tool_calls` holds every run of the tenant, also one without a budget
/// of its own: `started` announces it as the budget in force, and the run's end is counted
/// on `/metrics`.
#[tokio::test]
async fn the_tenants_ceiling_holds_a_run_without_a_budget() {
    let llm = FakeOpenAi::start(vec![Reply::calls(
        &[],
        vec![time_call("c1"), time_call("c2")],
        (20, 10),
    )])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.max_run_tool_calls = 1;
    })
    .await;
    let mut client = server.agents().await;
    let events = run_to_end(&mut client, time_request("Time twice?")).await;

    // The budget in force is announced as the run starts: the tenant's ceiling.
    match &events[0].event {
        Some(pb::run_event::Event::Started(started)) => {
            let budget = started.budget.as_ref().expect("the budget in force");
            assert_eq!(budget.max_tool_calls, Some(1));
            assert_eq!(budget.max_tokens, None);
        }
        other => panic!("the first event is not `started`: {other:?}"),
    }
    let end = end_of(&events);
    assert_eq!(end.budget_exhausted, "tool_calls");
    let calls = &final_thoughts(&events)[0].tool_calls;
    assert_eq!(
        calls[1].observation,
        "not run: the run's tool-call budget (1) is spent"
    );
    let metrics = reqwest::get(format!("http://{}/metrics", server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agent_runner_budget_exhausted_total{kind=\"tool_calls\"} 1"),
        "{metrics}"
    );
}

/// A cost budget needs a price for every model the run may call; bad budgets name their
/// field.
#[tokio::test]
async fn budgets_that_cannot_hold_are_refused_naming_the_field() {
    let (_llm, _server, client) = start(vec![]).await;
    let refusal = |request: pb::RunRequest| {
        let mut client = client.clone();
        async move {
            let status = client.run(request).await.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument);
            status.message().to_owned()
        }
    };
    let unpriced = with_budget(
        run_request("hi", &[]).model(BLOCKING_MODEL),
        budget(|b| b.max_cost = "0.01".into()),
    );
    let text = refusal(unpriced).await;
    assert!(
        text.starts_with("agent.budget.max_cost sets a cost budget, but model")
            && text.contains(BLOCKING_MODEL),
        "{text}"
    );
    let mut with_unpriced_fallback = with_budget(
        run_request("hi", &[]),
        budget(|b| b.max_cost = "0.01".into()),
    );
    with_unpriced_fallback.model_mut().fallbacks = vec![pb::ModelRef {
        provider: PROVIDER.into(),
        name: BLOCKING_MODEL.into(),
    }];
    assert!(refusal(with_unpriced_fallback)
        .await
        .contains(BLOCKING_MODEL));
    let text = refusal(with_budget(
        run_request("hi", &[]),
        budget(|b| b.max_cost = "free".into()),
    ))
    .await;
    assert_eq!(
        text,
        "agent.budget.max_cost must be a positive decimal such as \"0.25\", at most 1000000000"
    );
    // A valid decimal past the bound (it once overflowed the budget arithmetic and ended
    // every such run `internal`).
    let text = refusal(with_budget(
        run_request("hi", &[]),
        budget(|b| b.max_cost = "79228162514264337593543950335".into()),
    ))
    .await;
    assert!(text.starts_with("agent.budget.max_cost must be"), "{text}");
    let text = refusal(with_budget(
        run_request("hi", &[]),
        budget(|b| b.max_seconds = Some(100_000)),
    ))
    .await;
    assert_eq!(text, "agent.budget.max_seconds must be between 1 and 86400");
}

/// A stored version's budget may be lowered per run, never raised.
#[tokio::test]
async fn a_run_may_lower_its_versions_budget_but_not_raise_it() {
    let (llm, server, mut client) = start(vec![Reply::calls(
        &[],
        vec![time_call("c1"), time_call("c2")],
        (20, 10),
    )])
    .await;
    let mut library = server.library().await;
    let mut config = time_request("unused").agent.unwrap();
    config.budget = budget(|b| b.max_tool_calls = Some(2));
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "clock".into(),
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap();
    let by_reference = |overrides: Option<pb::Budget>| pb::RunRequest {
        query: "Time twice?".into(),
        agent_ref: Some(pb::AgentRef {
            agent_id: "clock".into(),
            ..Default::default()
        }),
        overrides: Some(pb::RunOverrides {
            budget: overrides,
            ..Default::default()
        }),
        ..Default::default()
    };
    let status = client
        .run(by_reference(budget(|b| b.max_tool_calls = Some(3))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "overrides.budget.max_tool_calls must not be above the agent's budget (2)"
    );
    let events = run_to_end(
        &mut client,
        by_reference(budget(|b| b.max_tool_calls = Some(1))),
    )
    .await;
    assert_eq!(end_of(&events).budget_exhausted, "tool_calls");
    let stored = message(&mut client, &events[0].message_id).await;
    assert_eq!(
        stored.overrides.unwrap().budget.unwrap().max_tool_calls,
        Some(1)
    );
    assert_eq!(llm.requests().len(), 1);
}

/// A sub-agent spends from its parent's budget: it gets what the parent has left, and once
/// its spend and the parent's together leave too little, the parent stops.
#[tokio::test]
async fn a_parent_and_its_sub_agent_share_one_budget() {
    let ask: &'static str = r#"{"input": "capital of France?"}"#;
    let (llm, server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new("c1", "researcher", &[ask])],
            (100, 20),
        ),
        Reply::text(&["Paris."], (700, 150)),
    ])
    .await;
    let mut library = server.library().await;
    let mut config = run_request("unused", &[]).agent.unwrap();
    config.instruction = "You research.".into();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "researcher".into(),
            description: "Finds things out.".into(),
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut request = with_budget(
        run_request("What is the capital of France?", &[]),
        budget(|b| b.max_tokens = Some(1000)),
    );
    request.agent_mut().sub_agents = vec![pb::AgentRef {
        agent_id: "researcher".into(),
        ..Default::default()
    }];
    let events = run_to_end(&mut client, request).await;

    let child_cap = max_tokens_sent(&llm, 1);
    assert!(
        child_cap < 880,
        "the child may spend only what is left: {child_cap}"
    );
    assert_eq!(
        llm.requests().len(),
        2,
        "30 tokens left pay no prompt of the parent's"
    );
    let end = end_of(&events);
    assert_eq!(end.budget_exhausted, "tokens");
    let total = end.usage.unwrap().total_tokens;
    assert_eq!(total, 970);
    assert!(total <= 1000);
    let call = &final_thoughts(&events)[0].tool_calls[0];
    assert_eq!(call.observation, "Paris.");
}

/// A sub-agent's own tool calls count against its parent's tool-call budget, and a cost
/// budget is refused when a sub-agent's model has no price.
#[tokio::test]
async fn a_sub_agents_calls_count_and_its_model_needs_a_price() {
    let ask: &'static str = r#"{"input": "what time is it twice?"}"#;
    let (llm, server, mut client) = start(vec![
        Reply::calls(&[], vec![ScriptedCall::new("p1", "clock", &[ask])], (10, 5)),
        Reply::calls(&[], vec![time_call("k1"), time_call("k2")], (10, 5)),
        Reply::text(&["Noon, twice."], (10, 5)),
        Reply::calls(&[], vec![time_call("p2")], (10, 5)),
    ])
    .await;
    let mut library = server.library().await;
    for (id, model) in [("clock", None), ("unpriced", Some(BLOCKING_MODEL))] {
        let mut request = time_request("unused");
        if let Some(model) = model {
            request = request.model(model);
        }
        library
            .create_agent(pb::CreateAgentRequest {
                agent_id: id.into(),
                description: "Tells the time.".into(),
                config: request.agent,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let parent = |sub_agent: &str, budget: Option<pb::Budget>| {
        let mut request = with_budget(time_request("Ask the clock."), budget);
        request.agent_mut().sub_agents = vec![pb::AgentRef {
            agent_id: sub_agent.into(),
            ..Default::default()
        }];
        request
    };

    let status = client
        .run(parent("unpriced", budget(|b| b.max_cost = "0.01".into())))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains(BLOCKING_MODEL),
        "{}",
        status.message()
    );

    // One level further down: the tree is checked as it resolves at `Run`, not when the
    // unpriced grandchild would start.
    let mut middle = time_request("unused");
    middle.agent_mut().sub_agents = vec![pb::AgentRef {
        agent_id: "unpriced".into(),
        ..Default::default()
    }];
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "middle".into(),
            description: "Asks the unpriced agent.".into(),
            config: middle.agent,
            ..Default::default()
        })
        .await
        .unwrap();
    let status = client
        .run(parent("middle", budget(|b| b.max_cost = "0.01".into())))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains(BLOCKING_MODEL),
        "{}",
        status.message()
    );

    let events = run_to_end(
        &mut client,
        parent("clock", budget(|b| b.max_tool_calls = Some(3))),
    )
    .await;
    let end = end_of(&events);
    assert_eq!(end.budget_exhausted, "tool_calls");
    let thoughts = final_thoughts(&events);
    assert_eq!(thoughts[0].tool_calls[0].observation, "Noon, twice.");
    assert_eq!(
        thoughts[1].tool_calls[0].observation,
        "not run: the run's tool-call budget (3) is spent"
    );
    assert_eq!(llm.requests().len(), 4);
}

/// A budget kind, how to set it, and a model reply that runs it out.
type Case = (&'static str, fn(&mut pb::Budget), Reply);

/// Every budget kind ends a ReAct run as it ends a function-calling one.
#[tokio::test]
async fn each_budget_ends_a_react_run_too() {
    let action: &'static str =
        "Thought: calculate.\nAction:\n```json\n{\"action\": \"eval_expression\", \"action_input\": {\"expression\": \"6*7\"}}\n```";
    let cases: [Case; 4] = [
        (
            "tokens",
            |b| b.max_tokens = Some(400),
            Reply::text(&[action], (300, 60)),
        ),
        (
            "cost",
            |b| b.max_cost = "0.0004".into(),
            Reply::text(&[action], (300, 50)),
        ),
        (
            "wall_clock",
            |b| b.max_seconds = Some(1),
            Reply::Slow {
                text: vec!["Thought: ", "slowly"],
                delay_ms: 2_000,
            },
        ),
        (
            "tool_calls",
            |b| b.max_tool_calls = Some(0),
            Reply::text(&[action], (30, 10)),
        ),
    ];
    for (kind, edit, reply) in cases {
        let (_llm, _server, mut client) = start(vec![reply]).await;
        let request = with_budget(
            run_request("What is 6 times 7?", &[("maths", "eval_expression")])
                .strategy(pb::Strategy::ChainOfThought),
            budget(edit),
        );
        let started = Instant::now();
        let events = run_to_end(&mut client, request).await;
        let end = end_of(&events);
        assert_eq!(
            end.finish_reason,
            pb::FinishReason::BudgetExhausted as i32,
            "{kind}"
        );
        assert_eq!(end.budget_exhausted, kind);
        assert!(started.elapsed() < Duration::from_secs(2), "{kind}");
        let usage = end.usage.unwrap();
        if kind != "wall_clock" {
            assert!(usage.total_tokens > 0, "{kind}: the usage so far");
        }
    }
}
