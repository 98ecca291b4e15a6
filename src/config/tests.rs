//! The configuration's parsing and validation: each refusal names its setting.

use super::*;

#[test]
fn an_empty_file_is_the_embedded_default() {
    let config = Config::from_toml("")
        .unwrap()
        .with_default_provider()
        .validated()
        .unwrap();
    assert_eq!(config.server.listen, ServerConfig::default().listen);
    assert_eq!(config.server.data_dir, PathBuf::from("./data"));
    assert!(config.providers.contains_key("openai"));
}

#[test]
fn providers_and_models_parse_with_prices_and_features() {
    let config = Config::from_toml(
        r#"
        [runner]
        tool_timeout_secs = 5

        [providers.local]
        base_url = "http://127.0.0.1:8000/v1"
        strict_models = true

        [[providers.local.models]]
        name = "qwen"
        context_window = 32768
        features = ["tool-call", "stream-tool-call"]
        input_price = "0.5"
        output_price = 1.5
        "#,
    )
    .unwrap()
    .validated()
    .unwrap();
    let local = &config.providers["local"];
    assert_eq!(local.models[0].context_window, Some(32768));
    assert_eq!(local.models[0].output_price.to_string(), "1.5");
    assert_eq!(config.runner.tool_timeout_secs, 5);
}

#[test]
fn a_reachable_address_needs_auth_or_an_explicit_waiver() {
    let reachable = "[server]\nlisten = \"0.0.0.0:50051\"\n";
    let err = Config::from_toml(reachable)
        .unwrap()
        .validated()
        .unwrap_err();
    assert!(matches!(err, ConfigError::Unprotected { .. }), "{err}");
    assert!(err.to_string().contains("--insecure-no-auth"));
    for waiver in ["[auth]\nrequired = true", "[auth]\ninsecure_no_auth = true"] {
        let text = format!("{reachable}{waiver}");
        assert!(Config::from_toml(&text).unwrap().validated().is_ok());
    }
    let loopback = Config::from_toml("[server]\nlisten = \"[::1]:1\"").unwrap();
    assert!(loopback.validated().is_ok());
}

#[test]
fn a_metrics_listener_serving_agent_cards_follows_the_same_rule() {
    let cards = "[server]\nmetrics_listen = \"0.0.0.0:9090\"\n[a2a]\nenabled = true\n";
    let err = Config::from_toml(cards).unwrap().validated().unwrap_err();
    assert!(
        matches!(err, ConfigError::Unprotected { listen } if listen.port() == 9090),
        "{err}"
    );
    for waiver in ["[auth]\nrequired = true", "[auth]\ninsecure_no_auth = true"] {
        let text = format!("{cards}{waiver}");
        assert!(Config::from_toml(&text).unwrap().validated().is_ok());
    }
    // Metrics alone carry no tenant's data: any address may serve them.
    let metrics_only = "[server]\nmetrics_listen = \"0.0.0.0:9090\"\n";
    assert!(Config::from_toml(metrics_only).unwrap().validated().is_ok());
}

#[test]
fn tls_files_come_in_pairs() {
    let err = Config::from_toml("[tls]\ncert = \"c.pem\"")
        .unwrap()
        .validated()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: tls.key is needed with tls.cert"
    );
    let err = Config::from_toml("[tls]\nclient_ca = \"ca.pem\"")
        .unwrap()
        .validated()
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("invalid configuration: tls.client_ca"));
}

#[test]
fn unknown_keys_and_bad_urls_are_rejected() {
    assert!(Config::from_toml("[server]\nlisten_on = 1").is_err());
    assert!(Config::from_toml("[limits]\nruns_per_minut = 1").is_err());
    let limits = Config::from_toml("[limits]\nruns_per_minute = 7")
        .unwrap()
        .limits;
    assert_eq!((limits.runs_per_minute, limits.tokens_per_day), (7, 0));
    let err = Config::from_toml("[providers.x]\nbase_url = \"ftp://h\"")
        .unwrap()
        .validated()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: providers.x.base_url must be an http:// or https:// URL"
    );
}

#[test]
fn cors_origins_are_origins_and_any_origin_needs_api_keys() {
    let config = |toml: &str| Config::from_toml(toml).unwrap().validated();
    let listed = config(
        "[server]\ncors_origins = [\"https://app.example.com\", \"http://localhost:5173\"]\n",
    );
    assert!(listed.is_ok(), "{:?}", listed.err());
    for bad in [
        "https://app.example.com/",
        "app.example.com",
        "ftp://x.example",
        "http://x.example:80",
        "https://a.example/path",
    ] {
        let err = config(&format!("[server]\ncors_origins = [\"{bad}\"]\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.cors_origins") && err.contains(bad),
            "{bad}: {err}"
        );
    }
    let any = config("[server]\ncors_origins = [\"*\"]\n")
        .unwrap_err()
        .to_string();
    assert!(any.contains("API keys"), "{any}");
    let with_keys = config("[auth]\nrequired = true\n[server]\ncors_origins = [\"*\"]\n");
    assert!(with_keys.is_ok(), "{:?}", with_keys.err());
}

#[test]
fn allowed_hosts_are_bare_hosts() {
    let config = |toml: &str| Config::from_toml(toml).unwrap().validated();
    assert!(config(
        "[server]\nallowed_hosts = [\"runner.internal\", \"10.0.0.5\", \"[fd00::1]\"]\n"
    )
    .is_ok());
    for bad in ["http://runner.internal", "runner.internal:8080", "a/b", ""] {
        let err = config(&format!("[server]\nallowed_hosts = [\"{bad}\"]\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.allowed_hosts"), "{bad}: {err}");
    }
}

/// The pace of forming calls' deltas is bounded: every delta is a stored event, so an
/// operator's typo must not make one per byte, nor hold text for minutes.
#[test]
fn argument_delta_pacing_is_bounded() {
    let refused = |toml: &str| {
        Config::from_toml(toml)
            .unwrap()
            .validated()
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refused("[runner]\ntool_delta_bytes = 0"),
        "invalid configuration: runner.tool_delta_bytes must be at least 1"
    );
    assert!(refused("[runner]\ntool_delta_interval_ms = 60000")
        .starts_with("invalid configuration: runner.tool_delta_interval_ms must be at most"));
    assert!(refused("[runner]\nmax_tool_delta_bytes = 99999999999")
        .starts_with("invalid configuration: runner.max_tool_delta_bytes must be at most"));
    let off = Config::from_toml("[runner]\nmax_tool_delta_bytes = 0")
        .unwrap()
        .validated()
        .unwrap();
    assert_eq!(off.runner.max_tool_delta_bytes, 0);
}

/// How long a call waits for a database connection is bounded both ways: no wait at all
/// would refuse every burst, and a wait of hours holds calls nobody waits for.
#[test]
fn the_pool_wait_is_bounded() {
    let validated = |toml: &str| Config::from_toml(toml).unwrap().validated();
    for toml in [
        "[store]\npool_wait_ms = 0",
        "[store]\npool_wait_ms = 600001",
    ] {
        assert_eq!(
            validated(toml).unwrap_err().to_string(),
            "invalid configuration: store.pool_wait_ms must be between 1 and 600000"
        );
    }
    assert_eq!(validated("").unwrap().store.pool_wait_ms, 60_000);
    let set = validated("[store]\npool_wait_ms = 250").unwrap();
    assert_eq!(set.store.pool_wait_ms, 250);
}

#[test]
fn worker_threads_are_bounded_and_the_flag_replaces_the_file() {
    for threads in [0, super::server::MAX_WORKER_THREADS + 1] {
        let text = format!("[server]\nworker_threads = {threads}");
        let err = Config::from_toml(&text).unwrap().validated().unwrap_err();
        assert!(err.to_string().contains("server.worker_threads"), "{err}");
    }
    let file = std::env::temp_dir().join(format!("workers-{}.toml", std::process::id()));
    std::fs::write(&file, "[server]\nworker_threads = 4").unwrap();
    let from_file = ServeArgs {
        config: Some(file.clone()),
        ..ServeArgs::default()
    };
    assert_eq!(
        Config::load(&from_file).unwrap().server.worker_threads,
        Some(4)
    );
    let flagged = ServeArgs {
        worker_threads: Some(1),
        ..from_file
    };
    assert_eq!(
        Config::load(&flagged).unwrap().server.worker_threads,
        Some(1)
    );
    std::fs::remove_file(file).unwrap();
}
