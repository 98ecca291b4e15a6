//! The terminal client: `agent-runner run|chat|attach|show|tools` as processes against the
//! real server and the scripted model, read the way a person or a script reads them.

use std::io::Read as _;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::pb;
use serde_json::Value;

use crate::auth::{auth_server, create_key};
use crate::support::process::{
    agent_runner, agent_runner_with, spawn_service, spawn_service_at, wait_for_exit,
};
use crate::support::STREAMING_MODEL;
use crate::support::{message, FakeOpenAi, Reply, ScriptedCall, TestServer, PROVIDER};
use crate::tenant_limits::limits;

fn model() -> String {
    format!("{PROVIDER}/{STREAMING_MODEL}")
}

/// What the child writes on stdout, gathered by a thread of its own as it comes.
fn read_stdout(
    child: &mut std::process::Child,
) -> (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        })
    };
    (seen, reader)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A tool round then an answer: what most runs look like.
fn tool_then_answer() -> Vec<Reply> {
    vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "c1",
                "eval_expression",
                &["{\"expression\": \"6*7\"}"],
            )],
            (12, 5),
        ),
        Reply::text(&["The answer ", "is 42."], (20, 6)),
    ]
}

/// The value after `label` on the line that has it: `message <id>` → the id.
fn word_after(output: &str, label: &str) -> String {
    output
        .split_whitespace()
        .skip_while(|word| *word != label)
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

/// A run shows the answer, the tool call with its arguments and observation, and a usage
/// line with tokens, cost and the ids; piped output has no colours; exit code 0.
#[tokio::test]
async fn run_shows_the_answer_the_tool_call_and_the_usage() {
    let llm = FakeOpenAi::start(tool_then_answer()).await;
    let server = TestServer::start(&llm.base_url()).await;
    let addr = server.addr.to_string();

    let output = agent_runner(
        &[
            "run",
            "What is 6*7?",
            "--model",
            &model(),
            "--tool",
            "maths/eval_expression",
            "--instruction",
            "Use tools.",
            "--addr",
            &addr,
        ],
        &[],
    )
    .await;

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let shown = text(&output.stdout);
    assert!(
        shown.contains("→ maths/eval_expression {\"expression\": \"6*7\"}"),
        "{shown}"
    );
    assert!(shown.contains("  ← 42 ("), "{shown}");
    assert!(shown.contains("The answer is 42.\n"), "{shown}");
    assert!(
        shown.contains("✓ completed (stop) · 2 rounds · tokens 32 in, 11 out · 0.000054 USD · "),
        "{shown}"
    );
    assert!(!shown.contains('\x1b'), "no colours when piped: {shown:?}");
    let message_id = word_after(&shown, "message");
    let stored = message(&mut server.agents().await, message_id.clone()).await;
    assert_eq!(stored.status, pb::MessageStatus::Completed as i32);
    assert_eq!(word_after(&shown, "conversation"), stored.conversation_id);
    let instruction = &llm.requests()[0]["messages"][0]["content"];
    assert_eq!(instruction, "Use tools.");

    let tree = agent_runner(&["show", &message_id, "--addr", &addr], &[]).await;
    let tree = text(&tree.stdout);
    assert!(tree.contains("query: What is 6*7?"), "{tree}");
    assert!(
        tree.contains("├─ round 1") && tree.contains("└─ round 2"),
        "{tree}"
    );
    assert!(
        tree.contains("│  └─ maths/eval_expression {\"expression\": \"6*7\"} → 42 ("),
        "{tree}"
    );
    assert!(tree.contains("   └─ answer: The answer is 42."), "{tree}");

    // The connection flags work before the subcommand as well, as in other CLIs.
    let before = agent_runner(&["--addr", &addr, "show", &message_id], &[]).await;
    assert!(before.status.success(), "{}", text(&before.stderr));
    assert_eq!(text(&before.stdout), tree);
}

/// `--json` prints one JSON object per event with stable names and numbers as numbers;
/// `attach --json` replays the same events; `show --json` parses too.
#[tokio::test]
async fn json_output_is_one_parsable_event_per_line() {
    let llm = FakeOpenAi::start(tool_then_answer()).await;
    let server = TestServer::start(&llm.base_url()).await;
    let addr = server.addr.to_string();

    let output = agent_runner(
        &[
            "run",
            "What is 6*7?",
            "-m",
            &model(),
            "-t",
            "maths/eval_expression",
            "--json",
            "--addr",
            &addr,
        ],
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let events: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"started"));
    assert_eq!(types.last(), Some(&"end"));
    assert!(types.contains(&"tool_finished"), "{types:?}");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let finished = events
        .iter()
        .find(|e| e["type"] == "tool_finished")
        .unwrap();
    assert_eq!(finished["tool_call"]["observation"], "42");
    assert_eq!(
        finished["tool_call"]["error"], "",
        "zero values are present"
    );
    let end = events.last().unwrap();
    assert_eq!(end["answer"], "The answer is 42.");
    assert_eq!(end["finish_reason"], "stop");
    assert_eq!(end["usage"]["prompt_tokens"], 32);
    assert_eq!(end["usage"]["completion_tokens"], 11);

    let message_id = end["message_id"].as_str().unwrap();
    let replayed = agent_runner(
        &[
            "attach", message_id, "--after", "2", "--json", "--addr", &addr,
        ],
        &[],
    )
    .await;
    assert_eq!(replayed.status.code(), Some(0));
    let replayed: Vec<Value> = text(&replayed.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(replayed, events[2..].to_vec());

    let shown = agent_runner(&["show", message_id, "--json", "--addr", &addr], &[]).await;
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["thoughts"].as_array().unwrap().len(), 2);
}

/// SIGINT to a running `run` cancels the run on the server, shows the cancelled end and
/// exits 130; the stored message is CANCELLED.
#[tokio::test]
async fn ctrl_c_cancels_the_run() {
    let pieces: Vec<&'static str> = vec!["tick "; 200];
    let llm = FakeOpenAi::start(vec![Reply::Slow {
        text: pieces,
        delay_ms: 50,
    }])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runner"))
        .args(["run", "Count slowly", "-m", &model()])
        .args(["--addr", &server.addr.to_string()])
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (seen, reader) = read_stdout(&mut child);
    for _ in 0..200 {
        if text(&seen.lock().unwrap()).contains("tick") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        text(&seen.lock().unwrap()).contains("tick"),
        "the answer streams"
    );

    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let status = wait_for_exit(&mut child, Duration::from_secs(10))
        .await
        .expect("the CLI exits");
    reader.join().unwrap();

    assert_eq!(status.code(), Some(130));
    let shown = text(&seen.lock().unwrap());
    assert!(shown.contains("■ cancelled"), "{shown}");
    let message_id = word_after(&shown, "message");
    let stored = message(&mut server.agents().await, message_id).await;
    assert_eq!(stored.status, pb::MessageStatus::Cancelled as i32);
}

/// A `run` whose server stops (SIGTERM) follows the run again once the server is back,
/// from the last event it showed: the handed-over run's end is shown and the CLI exits 0.
#[tokio::test]
async fn run_follows_a_handed_over_run_after_the_server_restarts() {
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half"]),
        Reply::text(&["Whole answer."], (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = spawn_service(dir.path(), &llm).await;
    let addr = service.addr;
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runner"))
        .args(["run", "Answer", "-m", &model(), "--json"])
        .args(["--addr", &addr.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (seen, reader) = read_stdout(&mut child);
    for _ in 0..250 {
        if text(&seen.lock().unwrap()).contains("Half") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(text(&seen.lock().unwrap()).contains("Half"));

    let stopped = Command::new("kill")
        .args(["-TERM", &service.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    wait_for_exit(&mut service.child, Duration::from_secs(10))
        .await
        .expect("the server stops");
    let _restarted = spawn_service_at(dir.path(), &llm, addr).await;
    let status = wait_for_exit(&mut child, Duration::from_secs(30))
        .await
        .expect("the CLI exits");
    reader.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();

    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("following the run again"), "{stderr}");
    let shown = text(&seen.lock().unwrap());
    let events: Vec<Value> = shown
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{shown}");
    assert!(
        events.iter().any(|e| e["type"] == "round_restarted"),
        "{shown}"
    );
    let end = events.last().unwrap();
    assert_eq!(end["type"], "end", "{shown}");
    assert_eq!(end["answer"], "Whole answer.");
}

/// Exit codes a script can use: 1 for a failed run (its error shown) and for a refusal
/// (the gRPC status on stderr), 2 for a bad command line, 3 when the server is unreachable.
#[tokio::test]
async fn exit_codes_tell_failed_refused_misused_and_unreachable_apart() {
    let llm = FakeOpenAi::start(vec![Reply::Error {
        status: 400,
        message: "context too long",
    }])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let addr = server.addr.to_string();
    let model = model();

    let failed = agent_runner(&["run", "hi", "-m", &model, "--addr", &addr], &[]).await;
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let shown = text(&failed.stdout);
    assert!(shown.contains("✗ failed: llm_bad_request: "), "{shown}");
    assert!(shown.contains("context too long"), "{shown}");

    let refused = agent_runner(
        &[
            "run",
            "hi",
            "-m",
            &model,
            "-t",
            "nope/tool",
            "--addr",
            &addr,
        ],
        &[],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        text(&refused.stderr),
        "error: INVALID_ARGUMENT: agent.tools[0].provider: unknown tool provider \"nope\"\n"
    );

    let misused = agent_runner(&["run", "hi", "--addr", &addr], &[]).await;
    assert_eq!(misused.status.code(), Some(2), "no --model: {misused:?}");
    let bad_model = agent_runner(&["run", "hi", "-m", "gpt-4o", "--addr", &addr], &[]).await;
    assert_eq!(bad_model.status.code(), Some(1));
    assert!(text(&bad_model.stderr).contains("must be provider/name"));

    let unreachable =
        agent_runner(&["run", "hi", "-m", &model, "--addr", "127.0.0.1:1"], &[]).await;
    assert_eq!(unreachable.status.code(), Some(3));
    assert!(
        text(&unreachable.stderr).starts_with("error: cannot reach the server at 127.0.0.1:1"),
        "{unreachable:?}"
    );
}

/// `chat` reads one turn per line into one conversation; the second turn's prompt carries
/// the first turn.
#[tokio::test]
async fn chat_turns_share_one_conversation() {
    let llm = FakeOpenAi::start(vec![
        Reply::text(&["Hello, Ann."], (5, 3)),
        Reply::text(&["You are Ann."], (9, 3)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let output: Output = agent_runner_with(
        &["chat", "-m", &model(), "--addr", &server.addr.to_string()],
        &[],
        "I am Ann.\n\nWho am I?\n",
    )
    .await;

    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let shown = text(&output.stdout);
    assert!(
        shown.contains("Hello, Ann.") && shown.contains("You are Ann."),
        "{shown}"
    );
    let conversations: Vec<String> = shown
        .lines()
        .filter(|line| line.contains("conversation"))
        .map(|line| word_after(line, "conversation"))
        .collect();
    assert_eq!(conversations.len(), 2);
    assert_eq!(conversations[0], conversations[1]);
    let second = llm.requests()[1]["messages"].to_string();
    assert!(
        second.contains("I am Ann.") && second.contains("Hello, Ann."),
        "{second}"
    );
}

/// On a server that requires keys, the CLI sends `AGENT_RUNNER_API_KEY`; without it the
/// refusal is UNAUTHENTICATED. `tools` lists what agents can call.
#[tokio::test]
async fn the_cli_authenticates_with_an_api_key() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["Hi."], (1, 1))]).await;
    let server = auth_server(&llm, |_| {}).await;
    let addr = server.addr.to_string();
    let (_, key) = create_key(&server, "acme", limits(0, 0, 0)).await;

    let refused = agent_runner(&["tools", "--addr", &addr], &[]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).starts_with("error: UNAUTHENTICATED: "));

    let tools = agent_runner(
        &["tools", "--provider", "time", "--addr", &addr],
        &[("AGENT_RUNNER_API_KEY", &key)],
    )
    .await;
    assert_eq!(tools.status.code(), Some(0), "{tools:?}");
    let listed = text(&tools.stdout);
    assert!(listed.starts_with("time/current_time  "), "{listed}");
    assert_eq!(listed.lines().count(), 3, "{listed}");

    let run = agent_runner(
        &[
            "run",
            "hi",
            "-m",
            &model(),
            "--addr",
            &addr,
            "--api-key",
            &key,
        ],
        &[],
    )
    .await;
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(!text(&run.stdout).contains(&key));
}
