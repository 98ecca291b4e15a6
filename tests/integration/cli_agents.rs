//! `agent-runner agents …` and `run --agent` as processes against the real server: an
//! agent created from a TOML file, versioned, aliased, listed, shown and run by reference
//! with an override.

use crate::support::process::agent_runner;
use crate::support::{message, FakeOpenAi, Reply, TestServer, PROVIDER, STREAMING_MODEL};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn agent_file(instruction: &str) -> String {
    format!(
        r#"
agent_id = "helper"
name = "Helper"
description = "Answers briefly."
[labels]
team = "support"
[config]
instruction = "{instruction}"
[config.model]
provider = "{PROVIDER}"
name = "{STREAMING_MODEL}"
[[config.tools]]
provider = "time"
name = "current_time"
"#
    )
}

/// The CLI's `agents` commands create, alias, show and run a stored agent from a TOML file,
/// and `show` prints what `create` reads.
#[tokio::test]
async fn agents_are_created_aliased_shown_and_run_from_the_command_line() {
    let llm = FakeOpenAi::start(vec![
        Reply::text(&["One."], (5, 2)),
        Reply::text(&["Two."], (5, 2)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("helper.toml");
    let cli = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        agent_runner(&args, &[]).await
    };
    let with_addr = |args: &[&str]| {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.extend(["--addr".to_owned(), addr.clone()]);
        args
    };

    std::fs::write(&file, agent_file("You are version one.")).unwrap();
    let path = file.to_str().unwrap();
    let created = cli(with_addr(&["agents", "create", path])).await;
    assert_eq!(text(&created.stdout), "helper@1\n", "{created:?}");
    std::fs::write(&file, agent_file("You are version two.")).unwrap();
    let second = cli(with_addr(&["agents", "create", path])).await;
    assert_eq!(text(&second.stdout), "helper@2\n", "{second:?}");
    let alias = cli(with_addr(&[
        "agents", "alias", "helper", "prod", "1", "--expect", "0",
    ]))
    .await;
    assert_eq!(text(&alias.stdout), "helper:prod → 1\n", "{alias:?}");
    let stale = cli(with_addr(&[
        "agents", "alias", "helper", "prod", "2", "--expect", "0",
    ]))
    .await;
    assert_eq!(stale.status.code(), Some(1));
    assert!(text(&stale.stderr).starts_with("error: FAILED_PRECONDITION: "));

    let listed = cli(with_addr(&["agents", "list", "--label", "team=support"])).await;
    assert_eq!(
        text(&listed.stdout),
        "helper\t2\tlatest=2,prod=1\tHelper\n",
        "{listed:?}"
    );
    let none = cli(with_addr(&["agents", "list", "--label", "team=sales"])).await;
    assert_eq!(text(&none.stdout), "");

    let shown = cli(with_addr(&["agents", "show", "helper:prod"])).await;
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["version"], 1);
    assert_eq!(
        shown["file"]["config"]["instruction"],
        "You are version one."
    );
    assert_eq!(shown["file"]["config"]["tools"][0]["name"], "current_time");
    let shown_file = shown["file"].clone();
    let versions = cli(with_addr(&["agents", "versions", "helper"])).await;
    let numbers: Vec<String> = text(&versions.stdout)
        .lines()
        .map(|line| line.split('\t').next().unwrap().to_owned())
        .collect();
    assert_eq!(numbers, ["2", "1"]);

    let run = cli(with_addr(&[
        "run",
        "hi",
        "--agent",
        "helper:prod",
        "--instruction",
        "Answer in French.",
    ]))
    .await;
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let prompt = llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(prompt, "You are version one.\n\nAnswer in French.");
    let shown = text(&run.stdout);
    let message_id = shown
        .split_whitespace()
        .skip_while(|word| *word != "message")
        .nth(1)
        .unwrap()
        .to_owned();
    let stored = message(&mut server.agents().await, message_id).await;
    assert_eq!(
        (stored.agent_id.as_str(), stored.agent_version),
        ("helper", 1)
    );

    let latest = cli(with_addr(&["run", "hi", "--agent", "helper"])).await;
    assert_eq!(latest.status.code(), Some(0), "{latest:?}");
    let prompt = &llm.requests()[1]["messages"][0]["content"];
    assert_eq!(prompt, "You are version two.");

    // What `show` printed under `file` is a file `create` takes: it adds the same config.
    let again = dir.path().join("shown.json");
    std::fs::write(&again, shown_file.to_string()).unwrap();
    let recreated = cli(with_addr(&["agents", "create", again.to_str().unwrap()])).await;
    assert_eq!(text(&recreated.stdout), "helper@3\n", "{recreated:?}");
    let third = cli(with_addr(&["agents", "show", "helper@3"])).await;
    let third: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    assert_eq!(third["file"], shown_file);
}

/// A sub-agent's run shows indented under the call that started it.
#[tokio::test]
async fn a_childs_run_shows_indented_under_its_call() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![crate::support::ScriptedCall::new(
                "c1",
                "researcher",
                &[r#"{"input": "capital of France?"}"#],
            )],
            (5, 2),
        ),
        Reply::text(&["Paris", " it is."], (7, 3)),
        Reply::text(&["The capital is Paris."], (5, 2)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let researcher = dir.path().join("researcher.toml");
    std::fs::write(
        &researcher,
        format!(
            "agent_id = \"researcher\"\n[config]\ninstruction = \"You research.\"\n\
             [config.model]\nprovider = \"{PROVIDER}\"\nname = \"{STREAMING_MODEL}\"\n"
        ),
    )
    .unwrap();
    let lead = dir.path().join("lead.toml");
    std::fs::write(
        &lead,
        format!(
            "agent_id = \"lead\"\n[config]\ninstruction = \"You lead.\"\n\
             [config.model]\nprovider = \"{PROVIDER}\"\nname = \"{STREAMING_MODEL}\"\n\
             [[config.sub_agents]]\nagent_id = \"researcher\"\n"
        ),
    )
    .unwrap();
    for file in [&researcher, &lead] {
        let created = agent_runner(
            &["agents", "create", file.to_str().unwrap(), "--addr", &addr],
            &[],
        )
        .await;
        assert_eq!(created.status.code(), Some(0), "{created:?}");
    }
    let run = agent_runner(
        &["run", "capital?", "--agent", "lead", "--addr", &addr],
        &[],
    )
    .await;
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let shown = text(&run.stdout);
    assert!(
        shown.contains("→ agents/researcher {\"input\": \"capital of France?\"}"),
        "{shown}"
    );
    assert!(shown.contains("\n  │ Paris it is.\n"), "{shown}");
    assert!(shown.contains("\n  │ ✓ completed (stop)"), "{shown}");
    assert!(shown.contains("The capital is Paris."), "{shown}");
}
