//! Who may call: API keys managed while the server runs, tenants that come
//! from the key, the loopback-only default, TLS and mutual TLS with generated
//! certificates, and the replicas listed to the admin token (a tenant's limits are in
//! `tenant_limits`).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use agent_runner::config::Config;
use agent_runner::llm::Secret;
use agent_runner::pb;
use agent_runner::pb::admin_service_client::AdminServiceClient;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::process::agent_runner;
use crate::support::tls::Pki;
use crate::support::{config, end_of, run_request, FakeOpenAi, Reply, TestServer};

const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";

/// `message` with `authorization: Bearer <token>`, and `x-tenant-id` when given.
pub(crate) fn signed<T>(message: T, token: &str, tenant: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    let metadata = request.metadata_mut();
    metadata.insert("authorization", format!("Bearer {token}").parse().unwrap());
    if let Some(tenant) = tenant {
        metadata.insert("x-tenant-id", tenant.parse().unwrap());
    }
    request
}

/// `config` requiring a key on every call, with the tests' admin token.
pub(crate) fn requiring_auth(config: &mut Config) {
    config.auth.required = true;
    config.auth.admin_token = Some(Secret::new(ADMIN_TOKEN));
}

pub(crate) async fn auth_server(llm: &FakeOpenAi, edit: impl FnOnce(&mut Config)) -> TestServer {
    TestServer::start_edited(&llm.base_url(), |config| {
        requiring_auth(config);
        edit(config);
    })
    .await
}

async fn admin(server: &TestServer) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(server.channel().await)
}

/// A new key of `tenant` with `limits`: its id and the secret to send.
pub(crate) async fn create_key(
    server: &TestServer,
    tenant: &str,
    limits: pb::TenantLimits,
) -> (String, String) {
    let created = admin(server)
        .await
        .create_api_key(signed(
            pb::CreateApiKeyRequest {
                tenant: tenant.into(),
                name: format!("{tenant}-tests"),
                limits: Some(limits),
            },
            ADMIN_TOKEN,
            None,
        ))
        .await
        .unwrap()
        .into_inner();
    (created.key.unwrap().id, created.secret)
}

/// Runs `request` as `key` to its end; returns the message id.
pub(crate) async fn run_as(
    client: &mut AgentServiceClient<Channel>,
    key: &str,
    query: &str,
) -> String {
    let mut stream = client
        .run(signed(run_request(query, &[]), key, None))
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    end_of(&events);
    events[0].message_id.clone()
}

fn get_message(id: &str) -> pb::GetMessageRequest {
    pb::GetMessageRequest {
        message_id: id.into(),
    }
}

fn code_of<T: std::fmt::Debug>(result: Result<T, Status>) -> (Code, String) {
    let status = result.unwrap_err();
    (status.code(), status.message().to_owned())
}

/// With keys required, a call without a key, with a wrong one or with a revoked one is
/// `UNAUTHENTICATED`, while health probes still answer.
#[tokio::test]
async fn required_auth_turns_away_missing_bad_and_revoked_keys_but_not_probes() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["hello"], (3, 1))]).await;
    let server = auth_server(&llm, |_| {}).await;
    let mut agents = server.agents().await;

    // No key at all, on both services.
    let (code, text) = code_of(agents.run(run_request("hi", &[])).await);
    assert_eq!(code, Code::Unauthenticated);
    assert!(text.contains("authorization: Bearer"), "{text}");
    let (code, _) = code_of(
        server
            .tools()
            .await
            .list_tools(pb::ListToolsRequest::default())
            .await,
    );
    assert_eq!(code, Code::Unauthenticated);
    // A header naming a tenant is no credential.
    let mut spoofed = Request::new(get_message("00000000-0000-0000-0000-000000000000"));
    spoofed
        .metadata_mut()
        .insert("x-tenant-id", "acme".parse().unwrap());
    assert_eq!(
        code_of(agents.get_message(spoofed).await).0,
        Code::Unauthenticated
    );

    let (id, key) = create_key(&server, "acme", pb::TenantLimits::default()).await;
    let message = run_as(&mut agents, &key, "hi").await;

    // Malformed, unknown and tampered keys.
    let mut tampered = key.clone();
    tampered.pop();
    tampered.push(if key.ends_with('A') { 'B' } else { 'A' });
    for bad in ["nonsense", "ar_0123456789abcdef_secret", tampered.as_str()] {
        let refused = agents
            .get_message(signed(get_message(&message), bad, None))
            .await;
        let (code, text) = code_of(refused);
        assert_eq!(code, Code::Unauthenticated, "{bad}");
        assert!(!text.contains(bad), "the refusal echoes the key: {text}");
    }
    let mut basic = Request::new(get_message(&message));
    basic
        .metadata_mut()
        .insert("authorization", format!("Basic {key}").parse().unwrap());
    assert_eq!(
        code_of(agents.get_message(basic).await).0,
        Code::Unauthenticated
    );

    // Listing shows the key without its secret, and that it was used.
    let listed = admin(&server)
        .await
        .list_api_keys(signed(
            pb::ListApiKeysRequest {
                tenant: "acme".into(),
            },
            ADMIN_TOKEN,
            None,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.keys.len(), 1);
    assert_eq!(listed.keys[0].id, id);
    assert!(listed.keys[0].last_used_at.is_some());
    // `ar_<id>_<secret>`: the secret may itself hold `_`, so split off the first two parts.
    let secret_part = key.splitn(3, '_').nth(2).unwrap();
    assert!(!format!("{listed:?}").contains(secret_part));

    // Revocation takes effect on the next call.
    admin(&server)
        .await
        .revoke_api_key(signed(
            pb::RevokeApiKeyRequest { id: id.clone() },
            ADMIN_TOKEN,
            None,
        ))
        .await
        .unwrap();
    let (code, _) = code_of(
        agents
            .get_message(signed(get_message(&message), &key, None))
            .await,
    );
    assert_eq!(code, Code::Unauthenticated);

    // Health needs no credential.
    let health = HealthClient::new(server.channel().await)
        .check(HealthCheckRequest {
            service: "agentrunner.v1.AgentService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");
}

/// `AdminService` answers only the admin token; a tenant's key cannot create keys.
#[tokio::test]
async fn admin_calls_need_the_admin_token_and_a_tenant_key_is_not_one() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = auth_server(&llm, |_| {}).await;
    let (_, key) = create_key(&server, "acme", pb::TenantLimits::default()).await;
    let list = || pb::ListApiKeysRequest {
        tenant: "acme".into(),
    };
    let mut admin = admin(&server).await;
    assert_eq!(
        code_of(admin.list_api_keys(list()).await).0,
        Code::Unauthenticated
    );
    for wrong in [key.as_str(), "admin-token-for-tests-0123456780"] {
        let (code, _) = code_of(admin.list_api_keys(signed(list(), wrong, None)).await);
        assert_eq!(code, Code::Unauthenticated);
    }
    let (code, text) = code_of(
        admin
            .revoke_api_key(signed(
                pb::RevokeApiKeyRequest { id: "nope".into() },
                ADMIN_TOKEN,
                None,
            ))
            .await,
    );
    assert_eq!(
        (code, text.as_str()),
        (Code::NotFound, "API key nope not found")
    );
    let (code, text) = code_of(
        admin
            .create_api_key(signed(
                pb::CreateApiKeyRequest::default(),
                ADMIN_TOKEN,
                None,
            ))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(text.starts_with("tenant "), "{text}");
    let (code, text) = code_of(
        admin
            .create_api_key(signed(
                pb::CreateApiKeyRequest {
                    tenant: "acme\nINFO forged line".into(),
                    ..Default::default()
                },
                ADMIN_TOKEN,
                None,
            ))
            .await,
    );
    let rule = "must be 1 to 64 bytes of printable characters (no control characters), \
                not blank and without leading or trailing whitespace";
    assert_eq!(
        (code, text.as_str()),
        (Code::InvalidArgument, format!("tenant {rule}").as_str())
    );
    // Blank names, and names that look like another tenant's, are refused the same way.
    for blank in [" ", "\u{3000}", "acme ", " acme"] {
        let (code, text) = code_of(
            admin
                .create_api_key(signed(
                    pb::CreateApiKeyRequest {
                        tenant: blank.into(),
                        ..Default::default()
                    },
                    ADMIN_TOKEN,
                    None,
                ))
                .await,
        );
        assert_eq!(
            (code, text.as_str()),
            (Code::InvalidArgument, format!("tenant {rule}").as_str()),
            "{blank:?}"
        );
    }

    // Without a configured admin token, no admin call can succeed.
    let open = TestServer::start(&llm.base_url()).await;
    let (code, text) = code_of(
        AdminServiceClient::new(open.channel().await)
            .list_api_keys(signed(list(), ADMIN_TOKEN, None))
            .await,
    );
    assert_eq!(code, Code::FailedPrecondition);
    assert!(text.contains("AGENT_RUNNER_ADMIN_TOKEN"), "{text}");
}

/// A tenant's key reaches only that tenant's records: naming another tenant in
/// `x-tenant-id` is `PERMISSION_DENIED`, and another tenant's records are `NOT_FOUND`.
#[tokio::test]
async fn a_key_reaches_only_its_own_tenant() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["for acme"], (3, 1))]).await;
    let server = auth_server(&llm, |_| {}).await;
    let (_, acme) = create_key(&server, "acme", pb::TenantLimits::default()).await;
    let (_, globex) = create_key(&server, "globex", pb::TenantLimits::default()).await;
    let mut agents = server.agents().await;
    let message = run_as(&mut agents, &acme, "hi").await;

    // Naming the key's own tenant is fine; naming another is refused.
    let own = agents
        .get_message(signed(get_message(&message), &acme, Some("acme")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own.answer, "for acme");
    let (code, text) = code_of(
        agents
            .get_message(signed(get_message(&message), &acme, Some("globex")))
            .await,
    );
    assert_eq!(code, Code::PermissionDenied);
    assert!(text.contains("globex"), "{text}");

    // The other tenant's key finds nothing, whatever it asks for.
    let (code, _) = code_of(
        agents
            .get_message(signed(get_message(&message), &globex, None))
            .await,
    );
    assert_eq!(code, Code::NotFound);
    let (code, _) = code_of(
        agents
            .list_thoughts(signed(
                pb::ListThoughtsRequest {
                    message_id: message.clone(),
                    ..Default::default()
                },
                &globex,
                None,
            ))
            .await,
    );
    assert_eq!(code, Code::NotFound);
    let (code, _) = code_of(
        agents
            .get_tool_call(signed(
                pb::GetToolCallRequest {
                    message_id: message.clone(),
                    tool_call_id: "any".into(),
                    position: 0,
                },
                &globex,
                None,
            ))
            .await,
    );
    assert_eq!(code, Code::NotFound);
    let (code, _) = code_of(
        agents
            .cancel(signed(
                pb::CancelRequest {
                    message_id: message.clone(),
                },
                &globex,
                None,
            ))
            .await,
    );
    assert_eq!(code, Code::NotFound);
    let own = agents
        .get_message(signed(get_message(&message), &acme, None))
        .await
        .unwrap()
        .into_inner();
    let (code, _) = code_of(
        agents
            .delete_conversation(signed(
                pb::DeleteConversationRequest {
                    conversation_id: own.conversation_id.clone(),
                },
                &globex,
                None,
            ))
            .await,
    );
    assert_eq!(code, Code::NotFound);
    // Still there for its owner.
    agents
        .get_message(signed(get_message(&message), &acme, None))
        .await
        .unwrap();
}

/// Server reflection answers by default, for grpcurl, and can be turned off.
#[tokio::test]
async fn reflection_is_open_by_default_and_can_be_closed() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    async fn list_services(server: &TestServer) -> Result<(), Status> {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new(server.channel().await)
            .server_reflection_info(tokio_stream::iter([request]))
            .await?
            .into_inner();
        answers.message().await?;
        Ok(())
    }

    let llm = FakeOpenAi::start(vec![]).await;
    let open = auth_server(&llm, |_| {}).await;
    list_services(&open).await.unwrap();
    let closed = auth_server(&llm, |config| config.auth.reflection = false).await;
    assert_eq!(
        list_services(&closed).await.unwrap_err().code(),
        Code::Unimplemented
    );
}

fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The CLI's `keys` commands create, list and revoke keys against a real server, and a
/// revoked key stops working.
#[tokio::test]
async fn the_cli_creates_lists_and_revokes_keys() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["hi"], (3, 1))]).await;
    let server = auth_server(&llm, |_| {}).await;
    let addr = server.addr.to_string();
    let token = [("AGENT_RUNNER_ADMIN_TOKEN", ADMIN_TOKEN)];

    let without_token =
        agent_runner(&["keys", "list", "--tenant", "acme", "--addr", &addr], &[]).await;
    assert!(!without_token.status.success());
    assert!(String::from_utf8_lossy(&without_token.stderr).contains("AGENT_RUNNER_ADMIN_TOKEN"));

    let created = agent_runner(
        &[
            "keys", "create", "--tenant", "acme", "--name", "ci", "--addr", &addr,
        ],
        &token,
    )
    .await;
    assert!(created.status.success(), "{created:?}");
    let key = stdout_lines(&created).pop().unwrap();
    assert!(key.starts_with("ar_") && !key.contains(' '), "{key}");
    let mut agents = server.agents().await;
    run_as(&mut agents, &key, "hi").await;

    let listed = agent_runner(
        &["keys", "list", "--tenant", "acme", "--addr", &addr],
        &token,
    )
    .await;
    assert!(listed.status.success(), "{listed:?}");
    let lines = stdout_lines(&listed);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let id = lines[0].split('\t').next().unwrap().to_owned();
    assert!(key.starts_with(&format!("ar_{id}_")), "{lines:?}");
    assert!(lines[0].contains("\tci\t"), "{lines:?}");
    assert!(!lines[0].contains(key.splitn(3, '_').nth(2).unwrap()));
    assert!(!lines[0].contains("last used never"), "{lines:?}");

    let revoked = agent_runner(&["keys", "revoke", &id, "--addr", &addr], &token).await;
    assert!(revoked.status.success(), "{revoked:?}");
    let refused = agents
        .get_message(signed(
            get_message("00000000-0000-0000-0000-000000000000"),
            &key,
            None,
        ))
        .await;
    assert_eq!(code_of(refused).0, Code::Unauthenticated);
    let listed = agent_runner(
        &["keys", "list", "--tenant", "acme", "--addr", &addr],
        &token,
    )
    .await;
    assert!(stdout_lines(&listed).is_empty());

    // Every limit flag reaches the key.
    let limited = agent_runner(
        &[
            "keys",
            "create",
            "--tenant",
            "acme",
            "--max-concurrent-runs",
            "2",
            "--runs-per-minute",
            "30",
            "--tokens-per-day",
            "9000",
            "--max-run-tokens",
            "800",
            "--max-run-cost",
            "0.5",
            "--max-run-seconds",
            "60",
            "--max-run-tool-calls",
            "7",
            "--max-concurrent-child-runs",
            "4",
            "--max-follow-streams",
            "3",
            "--addr",
            &addr,
        ],
        &token,
    )
    .await;
    assert!(limited.status.success(), "{limited:?}");
    let listed = agent_runner(
        &["keys", "list", "--tenant", "acme", "--addr", &addr],
        &token,
    )
    .await;
    let lines = stdout_lines(&listed);
    assert!(
        lines[0].ends_with(
            "limits concurrent=2 per_minute=30 tokens_per_day=9000 max_run_tokens=800 \
             max_run_cost=0.5 max_run_seconds=60 max_run_tool_calls=7 \
             max_concurrent_child_runs=4 max_follow_streams=3"
        ),
        "{lines:?}"
    );
}

/// The service refuses to start on a reachable address (`0.0.0.0`) without authentication
/// unless `--insecure-no-auth` says it is meant, and opens nothing before it refuses.
#[tokio::test]
async fn without_auth_the_service_refuses_a_reachable_address() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    let refused = agent_runner(
        &["serve", "--listen", "0.0.0.0:0", "--data-dir", &data],
        &[("AGENT_RUNNER_REQUIRE_AUTH", "false")],
    )
    .await;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("refusing to serve without authentication"),
        "{said}"
    );
    assert!(said.contains("--insecure-no-auth"), "{said}");
    assert!(!Path::new(&data).exists(), "nothing was opened");
}

/// A TLS server with client certificates required when `mutual`.
async fn tls_server(llm: &FakeOpenAi, pki: &Pki, mutual: bool) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&llm.base_url(), dir.path());
    config.tls.cert = Some(pki.server_cert.clone());
    config.tls.key = Some(pki.server_key.clone());
    config.tls.client_ca = mutual.then(|| pki.ca.clone());
    let config = config.validated().unwrap();
    TestServer::start_with(config).await.keeping(dir)
}

async fn tls_channel(server: &TestServer, tls: ClientTlsConfig) -> Result<Channel, String> {
    Channel::from_shared(format!("https://localhost:{}", server.addr.port()))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

/// Whether a `GetMessage` over `channel` reaches the service (a `NOT_FOUND` answer).
async fn reaches_service(channel: Channel) -> bool {
    AgentServiceClient::new(channel)
        .get_message(get_message("00000000-0000-0000-0000-000000000000"))
        .await
        .is_err_and(|status| status.code() == Code::NotFound)
}

/// With TLS configured, clients that trust the CA are served and a plaintext client is not.
#[tokio::test]
async fn tls_serves_clients_that_trust_its_ca_and_refuses_plaintext() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["over tls"], (3, 1))]).await;
    let pki = Pki::generate();
    let server = tls_server(&llm, &pki, false).await;

    let channel = tls_channel(&server, pki.client()).await.unwrap();
    let mut stream = AgentServiceClient::new(channel.clone())
        .run(run_request("hi", &[]))
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    assert_eq!(end_of(&events).answer, "over tls");

    // Plaintext HTTP/2 gets no answer from a TLS port.
    let plain = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    assert!(!reaches_service(plain).await);

    // The CLI's health check speaks TLS with --tls-ca.
    let addr = format!("localhost:{}", server.addr.port());
    let ca = pki.ca.display().to_string();
    let health = agent_runner(&["health", "--addr", &addr, "--tls-ca", &ca], &[]).await;
    assert!(health.status.success(), "{health:?}");
    assert_eq!(stdout_lines(&health), ["SERVING"]);
    let untrusting = agent_runner(&["health", "--addr", &addr], &[]).await;
    assert!(!untrusting.status.success());
}

/// With a client CA configured, only clients presenting a certificate it signed are
/// admitted.
#[tokio::test]
async fn mutual_tls_admits_only_certificates_of_the_client_ca() {
    let llm = FakeOpenAi::start(vec![]).await;
    let pki = Pki::generate();
    let server = tls_server(&llm, &pki, true).await;

    let trusted = tls_channel(&server, pki.client_with(&pki.client_cert, &pki.client_key))
        .await
        .unwrap();
    assert!(reaches_service(trusted).await);
    for tls in [
        pki.client(),
        pki.client_with(&pki.stranger_cert, &pki.stranger_key),
    ] {
        let refused = match tls_channel(&server, tls).await {
            Ok(channel) => !reaches_service(channel).await,
            Err(_) => true,
        };
        assert!(
            refused,
            "a client without a certificate of the CA was served"
        );
    }

    let addr = format!("127.0.0.1:{}", server.addr.port());
    let path = |p: &Path| p.display().to_string();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.client_cert), path(&pki.client_key));
    let health = agent_runner(
        &[
            "health",
            "--addr",
            &addr,
            "--tls-ca",
            &ca,
            "--tls-client-cert",
            &cert,
            "--tls-client-key",
            &key,
        ],
        &[],
    )
    .await;
    assert!(health.status.success(), "{health:?}");
    let anonymous = agent_runner(&["health", "--addr", &addr, "--tls-ca", &ca], &[]).await;
    assert!(!anonymous.status.success());
}

/// `ListReplicas` needs the admin token and lists the one replica of an embedded store:
/// live, answering, holding the run waiting for its caller; a tenant's key is refused.
#[tokio::test]
async fn replicas_are_listed_to_the_admin_token_only() {
    let llm = FakeOpenAi::start(vec![crate::support::replicas::calls_order_lookup()]).await;
    let server = auth_server(&llm, |config| config.runner.client_tool_timeout_secs = 60).await;
    let (_, key) = create_key(&server, "acme", pb::TenantLimits::default()).await;
    let mut request = crate::support::run_request("Where is order A1?", &[]);
    request
        .client_tools
        .push(crate::support::replicas::order_lookup());
    let mut agents = server.agents().await;
    let mut stream = agents
        .run(signed(request, &key, None))
        .await
        .unwrap()
        .into_inner();
    while let Some(event) = stream.message().await.unwrap() {
        if matches!(
            event.event,
            Some(pb::run_event::Event::ToolCallsRequired(_))
        ) {
            break;
        }
    }
    let mut admin = admin(&server).await;
    let refused = admin
        .list_replicas(signed(pb::ListReplicasRequest {}, &key, None))
        .await;
    assert_eq!(code_of(refused).0, Code::Unauthenticated);
    let replicas = admin
        .list_replicas(signed(pb::ListReplicasRequest {}, ADMIN_TOKEN, None))
        .await
        .unwrap()
        .into_inner()
        .replicas;
    assert_eq!(replicas.len(), 1, "{replicas:?}");
    let me = &replicas[0];
    assert!(me.live && me.answering, "{me:?}");
    assert_eq!(me.runs_held, 1, "the run waiting for its caller");
    assert!(me.started_at.is_some());
}
