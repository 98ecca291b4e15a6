//! Function-calling runs end to end.

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use serde_json::Value;

use crate::support::RunRequestExt;
use crate::support::{
    end_of, final_thoughts, kinds, run_request, run_to_end, streamed_text, TestServer,
    BLOCKING_MODEL,
};
use crate::support::{start, FakeOpenAi, Reply, ScriptedCall};

fn two_round_script() -> Vec<Reply> {
    vec![
        Reply::calls(
            &["Let me ", "check."],
            vec![ScriptedCall::new(
                "call_time_1",
                "current_time",
                &["{\"time", "zone\": \"Asia/", "Tokyo\", \"format\": \"%Z\"}"],
            )],
            (10, 5),
        ),
        Reply::text(&["In Tokyo ", "it is JST."], (20, 7)),
    ]
}

/// A user sees a two-round agent as it happens: the run starts, the model's words stream,
/// the tool call (whose arguments arrived in pieces) runs, its result is recorded on
/// thought 1, the answer streams in round 2, and the end carries the whole answer with
/// the usage and cost of both rounds. Event numbers have no gaps.
#[tokio::test]
async fn a_two_round_run_streams_every_step_and_sums_usage() {
    let (llm, _server, mut client) = start(two_round_script()).await;

    let events = run_to_end(
        &mut client,
        run_request("What time zone is Tokyo in?", &[("time", "current_time")]),
    )
    .await;

    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(
        matches!(kinds(&events)[0], Event::Started(s) if s.strategy == pb::Strategy::FunctionCalling as i32)
    );
    assert_eq!(streamed_text(&events), "Let me check.\nIn Tokyo it is JST.");
    let message_id = &events[0].message_id;
    assert!(events.iter().all(|e| &e.message_id == message_id));

    let thoughts = final_thoughts(&events);
    assert_eq!(
        thoughts.iter().map(|t| t.position).collect::<Vec<_>>(),
        vec![1, 2]
    );
    let call = &thoughts[0].tool_calls[0];
    assert_eq!(call.id, "call_time_1");
    assert_eq!(call.name, "current_time");
    assert_eq!(
        call.arguments,
        r#"{"timezone": "Asia/Tokyo", "format": "%Z"}"#
    );
    assert_eq!(call.observation, "JST");
    let meta = call.meta.as_ref().unwrap();
    assert!(meta.time_cost >= 0.0 && meta.time_cost < 5.0);
    assert_eq!(meta.error, "");
    assert_eq!(thoughts[0].thought, "Let me check.");
    assert_eq!(thoughts[1].answer, "In Tokyo it is JST.");
    assert!(thoughts[1].tool_calls.is_empty());
    assert!(kinds(&events).iter().any(
        |e| matches!(e, Event::ToolStarted(t) if t.tool_call.as_ref().unwrap().id == "call_time_1")
    ));
    assert!(kinds(&events).iter().any(|e| matches!(e, Event::ToolFinished(t) if t.tool_call.as_ref().unwrap().observation == "JST")));

    let end = end_of(&events);
    assert_eq!(end.answer, "Let me check.\nIn Tokyo it is JST.");
    assert_eq!(end.finish_reason, pb::FinishReason::Stop as i32);
    assert_eq!(end.iterations, 2);
    let usage = end.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (30, 12, 42)
    );
    assert_eq!(usage.prompt_price, "0.00003");
    assert_eq!(usage.completion_price, "0.000024");
    assert_eq!(usage.total_price, "0.000054");
    assert_eq!(usage.currency, "USD");

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], true);
    assert_eq!(requests[0]["stream_options"]["include_usage"], true);
    assert_eq!(requests[0]["tools"][0]["function"]["name"], "current_time");
    assert_eq!(requests[0]["messages"][0]["role"], "system");
    let messages = requests[1]["messages"].as_array().unwrap();
    let assistant = &messages[2];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_time_1");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        call.arguments.as_str()
    );
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_time_1");
    assert_eq!(messages[3]["content"], "JST");
}

/// A model that never stops calling tools gets `max_iteration + 1` calls, the last one
/// without tools on offer, and the run ends normally with `MAX_ITERATIONS`, not an error.
#[tokio::test]
async fn a_model_that_keeps_calling_tools_stops_at_the_iteration_limit() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::calls(
        &[],
        vec![ScriptedCall::new(
            "c",
            "eval_expression",
            &["{\"expression\": \"1+1\"}"],
        )],
        (1, 1),
    ));
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let request = run_request("loop", &[("maths", "eval_expression")]).max_iteration(2);

    let events = run_to_end(&mut client, request).await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].get("tools").is_some());
    assert!(requests[1].get("tools").is_some());
    assert!(
        requests[2].get("tools").is_none(),
        "the last round must offer no tools"
    );
    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::MaxIterations as i32);
    assert_eq!(end.iterations, 3);
    assert_eq!(end.usage.unwrap().total_tokens, 6);
    assert_eq!(final_thoughts(&events).len(), 3);
}

/// Two calls of the same tool in one round keep both results under their own call ids, and
/// an unknown tool or malformed arguments become observations the model can react to.
#[tokio::test]
async fn bad_calls_become_observations_and_duplicate_calls_keep_both_results() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("a", "eval_expression", &["{\"expression\": \"2*3\"}"]),
                ScriptedCall::new("b", "eval_expression", &["{\"expression\": \"2*4\"}"]),
                ScriptedCall::new("c", "web_search", &["{\"q\": \"x\"}"]),
                ScriptedCall::new("d", "eval_expression", &["{\"expression\": "]),
                ScriptedCall::new("e", "eval_expression", &["{\"expr\": \"1\"}"]),
            ],
            (5, 5),
        ),
        Reply::text(&["6 and 8."], (5, 5)),
    ])
    .await;

    let events = run_to_end(
        &mut client,
        run_request("compute", &[("maths", "eval_expression")]),
    )
    .await;

    let calls = &final_thoughts(&events)[0].tool_calls;
    let observation = |id: &str| {
        calls
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .observation
            .clone()
    };
    assert_eq!(calls.len(), 5);
    assert_eq!(observation("a"), "6");
    assert_eq!(observation("b"), "8");
    assert_eq!(observation("c"), "there is not a tool named web_search");
    assert!(observation("d")
        .starts_with("tool parameters validation error: arguments are not valid JSON"));
    assert!(
        observation("e").contains("\"expression\" is a required property"),
        "{}",
        observation("e")
    );
    assert_eq!(
        calls
            .iter()
            .find(|c| c.id == "c")
            .unwrap()
            .meta
            .as_ref()
            .unwrap()
            .error,
        observation("c")
    );
    assert_eq!(end_of(&events).finish_reason, pb::FinishReason::Stop as i32);
    let requests = llm.requests();
    let tool_messages: Vec<&Value> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 5);
    assert_eq!(tool_messages[1]["tool_call_id"], "b");
    assert_eq!(tool_messages[1]["content"], "8");
}

/// Tool calls of one round run at the same time: two calls of a tool that only returns
/// once two calls wait together both succeed (run one after the other, the first would
/// hit the 5 s tool timeout).
#[tokio::test]
async fn calls_of_one_round_run_concurrently() {
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("x", "rendezvous", &["{}"]),
                ScriptedCall::new("y", "rendezvous", &["{}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["done"], (1, 1)),
    ])
    .await;

    let events = run_to_end(
        &mut client,
        run_request("meet", &[("testing", "rendezvous")]),
    )
    .await;

    let calls = &final_thoughts(&events)[0].tool_calls;
    assert_eq!(
        calls
            .iter()
            .map(|c| c.observation.as_str())
            .collect::<Vec<_>>(),
        vec!["met", "met"]
    );
}

/// Models without streamed tool calls are called without `stream`, and the run behaves the
/// same: the answer still arrives as a delta and the tool still runs.
#[tokio::test]
async fn models_without_streamed_tool_calls_use_the_blocking_path() {
    let (llm, _server, mut client) = start(vec![
        Reply::Completion {
            text: "",
            calls: vec![ScriptedCall::new(
                "k",
                "eval_expression",
                &["{\"expression\": \"40+2\"}"],
            )],
            usage: (3, 2),
        },
        Reply::Completion {
            text: "42",
            calls: vec![],
            usage: (4, 1),
        },
    ])
    .await;
    let request = run_request("add", &[("maths", "eval_expression")]).model(BLOCKING_MODEL);

    let events = run_to_end(&mut client, request).await;

    let requests = llm.requests();
    assert_eq!(requests[0]["stream"], false);
    assert!(requests[0].get("stream_options").is_none());
    assert_eq!(final_thoughts(&events)[0].tool_calls[0].observation, "42");
    assert_eq!(streamed_text(&events), "42");
    let end = end_of(&events);
    assert_eq!(end.answer, "42");
    assert_eq!(end.usage.unwrap().total_tokens, 10);
}

/// A forced `tool_choice` in the model's parameters is sent while tools are offered and
/// until a round has called a tool; then it is `auto`, and on the last round (no tools) it
/// is not sent at all, which OpenAI would reject. `keep_tool_choice` keeps forcing.
#[tokio::test]
async fn a_forced_tool_choice_is_released_after_a_tool_call_and_never_sent_without_tools() {
    for keep in [false, true] {
        let call = || {
            Reply::calls(
                &[],
                vec![ScriptedCall::new(
                    "c",
                    "eval_expression",
                    &["{\"expression\": \"1\"}"],
                )],
                (1, 1),
            )
        };
        let (llm, _server, mut client) =
            start(vec![call(), call(), Reply::text(&["Done."], (1, 1))]).await;
        let mut request = run_request("go", &[("maths", "eval_expression")]).max_iteration(2);
        request.model_mut().parameters = Some(agent_runner::api::convert::json_to_struct(
            serde_json::json!({"tool_choice": "required", "parallel_tool_calls": false})
                .as_object()
                .unwrap(),
        ));
        request.agent_mut().keep_tool_choice = keep;
        let events = run_to_end(&mut client, request).await;
        assert_eq!(end_of(&events).answer, "Done.");
        let sent = llm.requests();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[0]["tool_choice"], "required");
        let second = if keep { "required" } else { "auto" };
        assert_eq!(sent[1]["tool_choice"], second);
        assert!(sent[2].get("tools").is_none());
        assert!(sent[2].get("tool_choice").is_none(), "{}", sent[2]);
        assert!(sent[2].get("parallel_tool_calls").is_none());
    }
}
