//! Runs against Anthropic's Messages API, played from recorded event streams: text, one
//! tool, parallel tools with interleaved deltas, a tool without input, thinking handed back
//! across rounds, errors in and before the stream, and both strategies.

use agent_runner::api::convert::json_to_struct;
use agent_runner::config::Config;
use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use serde_json::{json, Value};

use crate::support::fake_anthropic::{transcripts, FakeAnthropic, Received, Turn};
use crate::support::process::{client, spawn_on_default};
use crate::support::{
    end_of, final_thoughts, kinds, last_error, message, run_request, run_to_end, streamed_text,
    thoughts, Agents, FakeOpenAi, RunRequestExt, TestServer,
};

const MODEL: &str = "claude-sonnet-4-5";

/// The scripted Anthropic server and the real service with provider `claude` pointed at it
/// (prices 3 / 15 per million, cache reads 0.3, cache writes 3.75, 8192 output tokens).
async fn claude(turns: Vec<Turn>) -> (FakeAnthropic, TestServer, Agents) {
    let anthropic = FakeAnthropic::start(turns).await;
    let unused = FakeOpenAi::start(vec![]).await;
    let provider = Config::from_toml(&format!(
        r#"
        [providers.claude]
        kind = "anthropic"
        base_url = "{}"
        api_key = "sk-ant-test-key"
        retry_base_ms = 10

        [[providers.claude.models]]
        name = "{MODEL}"
        input_price = 3
        output_price = 15
        cache_read_price = "0.3"
        cache_write_price = "3.75"
        max_output_tokens = 8192
        "#,
        anthropic.base_url()
    ))
    .unwrap();
    let server = TestServer::start_edited(&unused.base_url(), |config| {
        config.providers.extend(provider.providers);
    })
    .await;
    let agents = server.agents().await;
    (anthropic, server, agents)
}

fn ask(query: &str, tools: &[(&str, &str)]) -> pb::RunRequest {
    run_request(query, tools).provider("claude").model(MODEL)
}

fn bodies(anthropic: &FakeAnthropic) -> Vec<Value> {
    anthropic.received().into_iter().map(|r| r.body).collect()
}

/// Anthropic's Messages API answers a plain question: the request carries the headers and
/// fields Anthropic requires, the text arrives as deltas, and the usage it reports is the
/// run's.
#[tokio::test]
async fn text_streams_as_deltas_with_usage_headers_and_the_required_fields() {
    let (anthropic, _server, mut agents) = claude(vec![Turn::Stream(transcripts::TEXT)]).await;
    let events = run_to_end(&mut agents, ask("Hi there", &[])).await;
    let end = end_of(&events);
    assert_eq!(end.answer, "Hello! How can I help today?");
    assert_eq!(streamed_text(&events), end.answer);
    let usage = end.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.estimated
        ),
        (25, 12, false)
    );
    // 25 × 3 + 12 × 15 per million.
    assert_eq!(usage.total_price, "0.000255");

    let [Received {
        body,
        api_key,
        version,
    }] = &anthropic.received()[..]
    else {
        panic!("one request expected");
    };
    assert_eq!(api_key.as_deref(), Some("sk-ant-test-key"));
    assert_eq!(version.as_deref(), Some("2023-06-01"));
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["max_tokens"], 8192,
        "the model's configured output limit"
    );
    assert_eq!(body["system"], "You are a helpful assistant.");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}])
    );
    assert!(body.get("tools").is_none());
}

/// A tool call on Anthropic goes back under Anthropic's own call id, and cache reads are
/// priced at their own rate, so the cost a client sees matches the bill.
#[tokio::test]
async fn one_tool_round_trips_under_anthropics_call_id_and_prices_cache_reads() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Stream(transcripts::TOOL_USE),
        Turn::Stream(transcripts::ANSWER_AFTER_TOOL),
    ])
    .await;
    let events = run_to_end(
        &mut agents,
        ask("Time in Tokyo?", &[("time", "current_time")]),
    )
    .await;
    let end = end_of(&events);
    // Function calling answers with all the text of every round.
    assert_eq!(
        end.answer,
        "Let me check the time in Tokyo.\nIt is nine in the morning in Tokyo."
    );
    let rounds = final_thoughts(&events);
    let call = &rounds[0].tool_calls[0];
    assert_eq!(call.id, "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(call.name, "current_time");
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(arguments, json!({"timezone": "Asia/Tokyo"}));
    assert!(call.meta.as_ref().unwrap().error.is_empty(), "{call:?}");

    let second = &bodies(&anthropic)[1];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me check the time in Tokyo."},
            {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "current_time",
             "input": {"timezone": "Asia/Tokyo"}}
        ]})
    );
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(result["content"], call.observation.as_str());

    let usage = end.usage.unwrap();
    assert_eq!(usage.prompt_tokens, 472 + 620 + 400);
    assert_eq!(usage.cache_read_tokens, 400);
    assert_eq!(usage.completion_tokens, 89 + 15);
    // Round 1: 472 × 3 + 89 × 15; round 2: 620 × 3 + 400 × 0.3 + 15 × 15 (per million).
    assert_eq!(usage.total_price, "0.004956");
}

/// Two tool calls whose deltas Anthropic interleaves are told apart: both run, and both
/// results go back in one turn.
#[tokio::test]
async fn parallel_tools_with_interleaved_deltas_both_run_and_answer_in_one_turn() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Stream(transcripts::PARALLEL_TOOLS),
        Turn::Stream(transcripts::TEXT),
    ])
    .await;
    let tools = [("time", "current_time"), ("maths", "eval_expression")];
    let events = run_to_end(&mut agents, ask("Time and 17*23?", &tools)).await;
    end_of(&events);
    let calls = &final_thoughts(&events)[0].tool_calls;
    let summary: Vec<(&str, Value)> = calls
        .iter()
        .map(|c| (c.id.as_str(), serde_json::from_str(&c.arguments).unwrap()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("toolu_01Time", json!({"timezone": "UTC"})),
            ("toolu_02Maths", json!({"expression": "17 * 23"}))
        ]
    );
    assert_eq!(calls[1].observation, "391");

    let second = &bodies(&anthropic)[1];
    let results = second["messages"][2]["content"].as_array().unwrap();
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["toolu_01Time", "toolu_02Maths"]);
    assert_eq!(results[1]["content"], "391");
}

/// A tool Anthropic calls with no input at all gets `{}`, not a parse error, so tools
/// without parameters work.
#[tokio::test]
async fn a_tool_called_without_input_gets_an_empty_object() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Stream(transcripts::TOOL_WITHOUT_INPUT),
        Turn::Stream(transcripts::TEXT),
    ])
    .await;
    let events = run_to_end(&mut agents, ask("Time?", &[("time", "current_time")])).await;
    end_of(&events);
    let call = &final_thoughts(&events)[0].tool_calls[0];
    assert_eq!(call.arguments, "{}");
    assert!(call.meta.as_ref().unwrap().error.is_empty(), "{call:?}");
    assert!(!call.observation.is_empty());
    let second = &bodies(&anthropic)[1];
    assert_eq!(second["messages"][1]["content"][0]["input"], json!({}));
}

/// Extended thinking never leaks into the answer, and goes back with its signature beside
/// the tool call, as Anthropic requires for the next round to be accepted.
#[tokio::test]
async fn thinking_is_never_answer_and_goes_back_signed_with_the_tool_call() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Stream(transcripts::THINKING_THEN_TOOL),
        Turn::Stream(transcripts::THINKING_THEN_ANSWER),
    ])
    .await;
    let mut request = ask("What is 17 * 23?", &[("maths", "eval_expression")]);
    let thinking = json!({"thinking": {"type": "enabled", "budget_tokens": 2000}});
    request.model_mut().parameters = Some(json_to_struct(thinking.as_object().unwrap()));
    let events = run_to_end(&mut agents, request).await;
    let end = end_of(&events);
    assert_eq!(end.answer, "17 * 23 = 391.");
    assert!(
        !format!("{events:?}").contains("SECRET-REASONING"),
        "thinking reached the client"
    );
    let id = events[0].message_id.clone();
    let stored = message(&mut agents, id.clone()).await;
    let records = thoughts(&mut agents, id).await;
    assert!(!format!("{stored:?}{records:?}").contains("SECRET-REASONING"));

    let sent = bodies(&anthropic);
    assert_eq!(
        sent[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 2000})
    );
    assert_eq!(sent[0]["max_tokens"], 8192);
    let assistant = sent[1]["messages"][1]["content"].as_array().unwrap();
    assert_eq!(
        assistant[0],
        json!({"type": "thinking",
               "thinking": "The user wants 17 * 23. SECRET-REASONING: use the maths tool.",
               "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+Xf/1Lt3Nqp9r4s3RXB0wA="})
    );
    assert_eq!(assistant[1]["type"], "tool_use");
    assert_eq!(assistant[1]["id"], "toolu_01Think");

    let usage = end.usage.unwrap();
    assert_eq!(usage.cache_creation_tokens, 650);
    assert_eq!(usage.cache_read_tokens, 650);
}

/// An `error` event in the middle of Anthropic's stream ends the run with Anthropic's own
/// text, and keeps the answer already streamed to the client.
#[tokio::test]
async fn an_error_event_mid_stream_ends_the_run_keeping_what_was_shown() {
    let (anthropic, _server, mut agents) =
        claude(vec![Turn::Stream(transcripts::OVERLOADED_MIDSTREAM)]).await;
    let events = run_to_end(&mut agents, ask("Hi", &[])).await;
    assert_eq!(streamed_text(&events), "The answer is");
    let error = last_error(&events);
    assert_eq!(error.code, "llm_server_error");
    assert!(error.message.contains("Overloaded"), "{}", error.message);
    assert_eq!(
        anthropic.received().len(),
        1,
        "no retry once text was shown"
    );
}

/// Anthropic's 529 (overloaded) and 429 (rate limited) are retried, so a busy provider
/// costs a delay, not a failed run.
#[tokio::test]
async fn overloaded_and_rate_limited_answers_are_retried() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Error {
            status: 529,
            kind: "overloaded_error",
            message: "Overloaded",
        },
        Turn::Error {
            status: 429,
            kind: "rate_limit_error",
            message: "Number of request tokens has exceeded your per-minute rate limit",
        },
        Turn::Stream(transcripts::TEXT),
    ])
    .await;
    let events = run_to_end(&mut agents, ask("Hi", &[])).await;
    assert_eq!(end_of(&events).answer, "Hello! How can I help today?");
    let retries: Vec<&pb::LlmRetry> = kinds(&events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Retry(retry) => Some(retry),
            _ => None,
        })
        .collect();
    let codes: Vec<&str> = retries.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["llm_server_error", "llm_rate_limited"]);
    assert!(retries[0].message.contains("Overloaded"));
    assert_eq!(anthropic.received().len(), 3);
}

/// ReAct runs on Anthropic: tools are described in the prompt, `Observation` is a stop
/// sequence, and no native tools are sent.
#[tokio::test]
async fn chain_of_thought_runs_on_anthropic_with_stop_sequences_and_no_native_tools() {
    let (anthropic, _server, mut agents) = claude(vec![
        Turn::Stream(transcripts::REACT_ACTION),
        Turn::Stream(transcripts::REACT_ANSWER),
    ])
    .await;
    let request = ask("What is 6 times 7?", &[("maths", "eval_expression")])
        .strategy(pb::Strategy::ChainOfThought);
    let events = run_to_end(&mut agents, request).await;
    let end = end_of(&events);
    assert_eq!(end.answer, "6 * 7 is 42.");
    let rounds = final_thoughts(&events);
    assert_eq!(rounds[0].tool_calls[0].observation, "42");

    let sent = bodies(&anthropic);
    assert!(
        sent[0].get("tools").is_none(),
        "ReAct offers no native tools"
    );
    let stop = sent[0]["stop_sequences"].as_array().unwrap();
    assert!(stop.contains(&json!("Observation")), "{stop:?}");
    assert!(sent[0]["system"]
        .as_str()
        .unwrap()
        .contains("eval_expression"));
    // Round 2 replays the scratchpad with the observation.
    let replay = sent[1]["messages"].to_string();
    assert!(replay.contains("Observation: 42"), "{replay}");
}

/// With no `[providers]` configured, Anthropic is reached with `ANTHROPIC_API_KEY` and
/// `ANTHROPIC_BASE_URL` from the environment, as its own SDKs do, and the key never reaches
/// the log.
#[tokio::test]
async fn with_no_configuration_anthropic_comes_from_its_environment_variables() {
    let anthropic = FakeAnthropic::start(vec![Turn::Stream(transcripts::TEXT)]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_on_default(
        dir.path(),
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-from-env".to_owned()),
            ("ANTHROPIC_BASE_URL", anthropic.base_url()),
        ],
    )
    .await;
    let mut agents = client(&service).await;
    let request = run_request("Hi", &[])
        .provider("anthropic")
        .model("claude-haiku-4-5");
    let events = run_to_end(&mut agents, request).await;
    assert_eq!(end_of(&events).answer, "Hello! How can I help today?");
    let received = anthropic.received();
    assert_eq!(received[0].api_key.as_deref(), Some("sk-ant-from-env"));
    assert_eq!(
        received[0].body["max_tokens"], 4096,
        "the documented default"
    );
    assert!(
        !service.log_text().contains("sk-ant-from-env"),
        "the key reached the log"
    );
}
