//! Browsers as clients: gRPC-Web on the main port, spoken here by hand over HTTP/1.1 (no
//! gRPC library: frames built from the protobuf messages, as a browser's runtime builds
//! them), in both framings. The same statuses as native gRPC arrive in the trailers; CORS
//! answers listed origins only; with API keys off a foreign `Host` is refused; hostile
//! frames get the code a native call would; agent cards are served on the main port.

use agent_runner::pb;
use base64::Engine as _;
use prost::Message as _;
use reqwest::header::HeaderMap;

use crate::support::{run_request, settled_status, start, FakeOpenAi, Reply, TestServer};

const BINARY: &str = "application/grpc-web+proto";
const TEXT: &str = "application/grpc-web-text";
const RUN: &str = "/agentrunner.v1.AgentService/Run";
const ATTACH: &str = "/agentrunner.v1.AgentService/Attach";

/// One gRPC-Web call's answer: its HTTP status and headers, its messages, and its status
/// (from the trailer frame, or from the headers of a trailers-only answer).
struct WebAnswer {
    http: u16,
    headers: HeaderMap,
    messages: Vec<Vec<u8>>,
    grpc_status: Option<String>,
    grpc_message: Option<String>,
}

/// A length-prefixed frame: flag, big-endian length, payload.
fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut framed = vec![flag];
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// The body `kind` carries for these frame bytes.
fn encode(kind: &str, frames: Vec<u8>) -> Vec<u8> {
    match kind {
        TEXT => base64::engine::general_purpose::STANDARD
            .encode(frames)
            .into_bytes(),
        _ => frames,
    }
}

/// The frame bytes of a body in `kind`; a text body is base64 in pieces, each padded.
fn decode(kind: &str, body: &[u8]) -> Vec<u8> {
    if kind != TEXT {
        return body.to_vec();
    }
    body.chunks(4)
        .flat_map(|quantum| {
            base64::engine::general_purpose::STANDARD
                .decode(quantum)
                .unwrap()
        })
        .collect()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().http1_only().build().unwrap()
}

/// Posts `body` (already framed) to `path` of `server` over HTTP/1.1.
async fn post(
    server: &TestServer,
    path: &str,
    kind: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client()
        .post(format!("http://{}{path}", server.addr))
        .header("content-type", kind)
        .header("accept", kind)
        .header("x-grpc-web", "1")
        .body(encode(kind, body));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Posts a `Run` of the encoded `request` in binary framing.
async fn run_web(
    server: &TestServer,
    request: &[u8],
    headers: &[(&str, &str)],
) -> reqwest::Response {
    post(server, RUN, BINARY, frame(0, request), headers).await
}

/// Reads a whole gRPC-Web answer.
async fn answer(kind: &str, response: reqwest::Response) -> WebAnswer {
    let http = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.unwrap();
    let mut bytes = decode(kind, &body).as_slice().to_vec();
    let mut messages = Vec::new();
    let mut trailers = String::new();
    while bytes.len() >= 5 {
        let flag = bytes[0];
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        let payload: Vec<u8> = bytes[5..5 + len].to_vec();
        bytes.drain(..5 + len);
        if flag & 0x80 != 0 {
            trailers.push_str(std::str::from_utf8(&payload).unwrap());
        } else {
            messages.push(payload);
        }
    }
    assert!(bytes.is_empty(), "a frame was cut short");
    let trailer = |name: &str| {
        trailers
            .split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_owned())
            .or_else(|| {
                headers
                    .get(name)
                    .map(|value| value.to_str().unwrap().to_owned())
            })
    };
    WebAnswer {
        http,
        grpc_status: trailer("grpc-status"),
        grpc_message: trailer("grpc-message"),
        headers,
        messages,
    }
}

fn events(answer: &WebAnswer) -> Vec<pb::RunEvent> {
    answer
        .messages
        .iter()
        .map(|bytes| pb::RunEvent::decode(bytes.as_slice()).unwrap())
        .collect()
}

/// A `Run` over gRPC-Web, binary and text, streams every event to `end` with status 0, in
/// the order and with the `seq`s a native client sees; the answer is whole.
#[tokio::test]
async fn a_grpc_web_client_over_http1_streams_a_run_to_its_end() {
    let (llm, server, _client) = start(vec![]).await;
    for kind in [BINARY, TEXT] {
        llm.repeat(Reply::text(&["Hello ", "from ", "the web."], (3, 4)));
        let request = run_request("say hello", &[]).encode_to_vec();
        let response = post(&server, RUN, kind, frame(0, &request), &[]).await;
        assert_eq!(response.version(), reqwest::Version::HTTP_11);
        let answer = answer(kind, response).await;
        assert_eq!(answer.http, 200);
        assert!(answer.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with(kind));
        assert_eq!(answer.grpc_status.as_deref(), Some("0"), "{kind}");
        let events = events(&answer);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        match events.last().and_then(|e| e.event.clone()) {
            Some(pb::run_event::Event::End(end)) => {
                assert_eq!(end.answer, "Hello from the web.", "{kind}");
            }
            other => panic!("the last event is not `end` ({kind}): {other:?}"),
        }
    }
}

/// gRPC-Web over HTTP/2 without TLS (h2c, as a proxy in front of browsers speaks it): the
/// same events and the status in the trailer frame.
#[tokio::test]
async fn a_grpc_web_client_over_h2c_streams_a_run_to_its_end() {
    use http_body_util::BodyExt as _;
    let (llm, server, _client) = start(vec![]).await;
    llm.repeat(Reply::text(&["Hello ", "over ", "h2c."], (3, 4)));
    let stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let body = frame(0, &run_request("say hello", &[]).encode_to_vec());
    let request = http::Request::post(format!("http://{}{RUN}", server.addr))
        .header("content-type", BINARY)
        .header("x-grpc-web", "1")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let mut bytes = body.to_vec();
    let (mut events, mut trailers) = (Vec::new(), String::new());
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        let payload = bytes[5..5 + len].to_vec();
        if bytes[0] & 0x80 != 0 {
            trailers.push_str(std::str::from_utf8(&payload).unwrap());
        } else {
            events.push(pb::RunEvent::decode(payload.as_slice()).unwrap());
        }
        bytes.drain(..5 + len);
    }
    assert!(trailers.contains("grpc-status:0"), "{trailers:?}");
    match events.last().and_then(|e| e.event.clone()) {
        Some(pb::run_event::Event::End(end)) => assert_eq!(end.answer, "Hello over h2c."),
        other => panic!("the last event is not `end`: {other:?}"),
    }
}

/// Another tenant attaching to a run is told `NOT_FOUND` in the trailers, as natively;
/// a request the service refuses to decode is `INVALID_ARGUMENT` naming the field.
#[tokio::test]
async fn statuses_arrive_in_the_trailers_as_a_native_client_gets_them() {
    let (llm, server, _client) = start(vec![]).await;
    llm.repeat(Reply::text(&["Mine."], (1, 1)));
    let request = run_request("private", &[]).encode_to_vec();
    let ran = answer(BINARY, run_web(&server, &request, &[]).await).await;
    let message_id = events(&ran)[0].message_id.clone();

    let attach = pb::AttachRequest {
        message_id: message_id.clone(),
        after_seq: 0,
    }
    .encode_to_vec();
    let foreign = post(
        &server,
        ATTACH,
        BINARY,
        frame(0, &attach),
        &[("x-tenant-id", "other")],
    )
    .await;
    let foreign = answer(BINARY, foreign).await;
    assert_eq!(foreign.grpc_status.as_deref(), Some("5"));
    assert!(foreign.messages.is_empty());
    let own = answer(
        BINARY,
        post(&server, ATTACH, BINARY, frame(0, &attach), &[]).await,
    )
    .await;
    assert_eq!(own.grpc_status.as_deref(), Some("0"));
    assert!(!own.messages.is_empty());

    // The deadline a browser sets in `grpc-timeout` holds as a native client's: the stream
    // ends, and the run is cancelled.
    llm.repeat(Reply::Stall(vec!["Thinking"]));
    let slow = run_request("too slow", &[]).encode_to_vec();
    let timed = async {
        let response = run_web(&server, &slow, &[("grpc-timeout", "1500m")]).await;
        answer(BINARY, response).await
    };
    let timed = tokio::time::timeout(std::time::Duration::from_secs(10), timed)
        .await
        .expect("the deadline ends the stream");
    assert!(
        matches!(timed.grpc_status.as_deref(), Some("0" | "4")),
        "{:?}",
        timed.grpc_status
    );
    let timed_id = events(&timed)[0].message_id.clone();
    let mut native = server.agents().await;
    let status = settled_status(&mut native, &timed_id).await;
    assert_eq!(status, pb::MessageStatus::Cancelled as i32);

    let empty = pb::RunRequest::default().encode_to_vec();
    let refused = answer(BINARY, run_web(&server, &empty, &[]).await).await;
    assert_eq!(refused.grpc_status.as_deref(), Some("3"));
    assert!(!refused.grpc_message.unwrap_or_default().is_empty());
}

/// A listed origin's preflight is answered with the headers the API reads and exposes its
/// status headers; any other origin gets no CORS header at all.
#[tokio::test]
async fn only_a_listed_origin_is_answered_by_cors() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.server.cors_origins = vec!["https://app.example.com".into()];
    })
    .await;
    let preflight = |origin: &'static str| {
        client()
            .request(
                reqwest::Method::OPTIONS,
                format!("http://{}{RUN}", server.addr),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,x-grpc-web,x-tenant-id,authorization",
            )
            .send()
    };
    let listed = preflight("https://app.example.com").await.unwrap();
    assert!(listed.status().is_success(), "{}", listed.status());
    let headers = listed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example.com"
    );
    let allowed = headers["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "authorization",
        "x-tenant-id",
        "x-grpc-web",
        "grpc-timeout",
        "content-type",
        "x-user-agent",
        "traceparent",
    ] {
        assert!(allowed.contains(name), "{name} in {allowed}");
    }

    let other = preflight("https://evil.example").await.unwrap();
    assert_eq!(other.status().as_u16(), 403);
    assert!(
        other
            .headers()
            .keys()
            .all(|name| !name.as_str().starts_with("access-control-")),
        "{:?}",
        other.headers()
    );

    llm.repeat(Reply::text(&["Cross-origin."], (1, 1)));
    let request = run_request("from the app", &[]).encode_to_vec();
    let call = run_web(&server, &request, &[("origin", "https://app.example.com")]).await;
    let exposed = call.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }
    assert_eq!(answer(BINARY, call).await.grpc_status.as_deref(), Some("0"));
    let unlisted = run_web(&server, &request, &[("origin", "https://evil.example")]).await;
    assert!(unlisted
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

/// With API keys off, a request naming a host that is neither loopback nor listed in
/// `[server] allowed_hosts` is refused 403 (a page on a rebound domain cannot call); a
/// listed one is served; native gRPC is untouched.
#[tokio::test]
async fn with_keys_off_a_foreign_host_is_refused() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.server.allowed_hosts = vec!["runner.internal".into()];
    })
    .await;
    llm.repeat(Reply::text(&["Near."], (1, 1)));
    let request = run_request("where am I", &[]).encode_to_vec();
    let foreign = run_web(&server, &request, &[("host", "rebound.example:50051")]).await;
    assert_eq!(foreign.status().as_u16(), 403);
    assert!(foreign.text().await.unwrap().contains("allowed_hosts"));
    let card = client()
        .get(format!("http://{}/anything", server.addr))
        .header("host", "rebound.example")
        .send()
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 403);

    let listed = run_web(&server, &request, &[("host", "runner.internal:50051")]).await;
    assert_eq!(
        answer(BINARY, listed).await.grpc_status.as_deref(),
        Some("0")
    );
    let mut native = server.agents().await;
    let events = crate::support::run_to_end(&mut native, run_request("native", &[])).await;
    assert!(!events.is_empty());
}

/// Hostile gRPC-Web bodies get the code a native call would, without a panic and without
/// reading past the limit; a `POST` that is not gRPC is `415`; the service stays SERVING.
#[tokio::test]
async fn hostile_grpc_web_frames_are_refused_with_native_codes() {
    let (_llm, server, _client) = start(vec![]).await;
    let request = run_request("hostile", &[]).encode_to_vec();
    let mut short = frame(0, &request);
    short.truncate(short.len() - 3);
    let mut wrong_length = frame(0, &request);
    wrong_length[1..5].copy_from_slice(&(request.len() as u32 + 100).to_be_bytes());
    let mut huge = frame(0, &request);
    huge[1..5].copy_from_slice(&(64u32 << 20).to_be_bytes());
    // The codes a native call gets for the same bytes: INTERNAL for a frame the decoder
    // cannot finish or decompress, RESOURCE_EXHAUSTED naming the limit.
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("a truncated frame", short, "13"),
        ("a wrong length prefix", wrong_length, "13"),
        (
            "the compressed flag without an encoding",
            frame(1, &request),
            "13",
        ),
        ("a length over the limit", huge, "8"),
    ];
    for (what, body, code) in cases {
        let refused = answer(BINARY, post(&server, RUN, BINARY, body, &[]).await).await;
        assert_eq!(refused.grpc_status.as_deref(), Some(code), "{what}");
        if code == "8" {
            let message = refused.grpc_message.unwrap_or_default();
            assert!(message.contains("max_request_bytes"), "{message}");
        }
    }

    let json = client()
        .post(format!("http://{}{RUN}", server.addr))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(json.status().as_u16(), 415);

    let health = tonic_health::pb::health_client::HealthClient::new(server.channel().await)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");
}

/// With `cancel_on_disconnect`, a browser that goes away (100 streams over HTTP/1.1, each
/// closed after its first delta) cancels its run, as a native client's does.
#[tokio::test]
async fn browsers_that_leave_cancel_their_runs() {
    let (llm, server, mut client) = start(vec![]).await;
    llm.repeat(Reply::Stall(vec!["Working"]));
    let mut ids = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..100 {
        let mut request = run_request("leave early", &[]);
        request.cancel_on_disconnect = true;
        let mut response = post(
            &server,
            RUN,
            BINARY,
            frame(0, &request.encode_to_vec()),
            &[],
        )
        .await;
        let first = response.chunk().await.unwrap().unwrap();
        let len = u32::from_be_bytes(first[1..5].try_into().unwrap()) as usize;
        let started = pb::RunEvent::decode(&first[5..5 + len]).unwrap();
        ids.push(started.message_id);
        streams.push(response);
    }
    drop(streams);
    for id in ids {
        let status = settled_status(&mut client, &id).await;
        assert_eq!(status, pb::MessageStatus::Cancelled as i32, "{id}");
    }
}

/// Agent cards are served on the main port too, for their tenant only.
#[tokio::test]
async fn agent_cards_are_served_on_the_main_port() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.a2a.enabled = true;
    })
    .await;
    server
        .library()
        .await
        .create_agent(pb::CreateAgentRequest {
            agent_id: "helper".into(),
            name: "The helper".into(),
            config: run_request("unused", &[]).agent,
            ..Default::default()
        })
        .await
        .unwrap();
    let card = |tenant: &'static str| {
        client()
            .get(format!(
                "http://{}/agents/helper/.well-known/agent-card.json",
                server.addr
            ))
            .header("x-tenant-id", tenant)
            .send()
    };
    let own = card("default").await.unwrap();
    assert_eq!(own.status().as_u16(), 200);
    let body: serde_json::Value = own.json().await.unwrap();
    assert_eq!(body["name"], "The helper");
    assert_eq!(card("other").await.unwrap().status().as_u16(), 404);
}

/// Under TLS, a browser's HTTP/1.1 (offered by ALPN beside `h2`) carries gRPC-Web as plain
/// text does.
#[tokio::test]
async fn grpc_web_is_served_over_tls_on_http1() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["Sealed."], (1, 1))]).await;
    let pki = crate::support::tls::Pki::generate();
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::config(&llm.base_url(), dir.path());
    config.tls.cert = Some(pki.server_cert.clone());
    config.tls.key = Some(pki.server_key.clone());
    let server = TestServer::start_with(config.validated().unwrap())
        .await
        .keeping(dir);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .http1_only()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let request = run_request("over tls", &[]).encode_to_vec();
    let response = https
        .post(format!("https://localhost:{}{RUN}", server.addr.port()))
        .header("content-type", BINARY)
        .header("x-grpc-web", "1")
        .body(frame(0, &request))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_11);
    let answer = answer(BINARY, response).await;
    assert_eq!(answer.grpc_status.as_deref(), Some("0"));
    match events(&answer).last().and_then(|e| e.event.clone()) {
        Some(pb::run_event::Event::End(end)) => assert_eq!(end.answer, "Sealed."),
        other => panic!("the last event is not `end`: {other:?}"),
    }
}

/// A refusal's rich details (here the `RetryInfo` of a tenant over its runs per minute)
/// reach a gRPC-Web client as `grpc-status-details-bin`, as they reach a native one.
#[tokio::test]
async fn rich_status_details_reach_a_grpc_web_client() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&["Once."], (1, 1)));
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.limits.runs_per_minute = 1;
    })
    .await;
    let request = run_request("count me", &[]).encode_to_vec();
    let first = answer(BINARY, run_web(&server, &request, &[]).await).await;
    assert_eq!(first.grpc_status.as_deref(), Some("0"));

    let refused = run_web(&server, &request, &[]).await;
    let details = refused
        .headers()
        .get("grpc-status-details-bin")
        .map(|value| value.to_str().unwrap().to_owned());
    let refused = answer(BINARY, refused).await;
    assert_eq!(refused.grpc_status.as_deref(), Some("8"));
    let details = details.expect("grpc-status-details-bin on the refusal");
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(details.trim_end_matches('='))
        .unwrap();
    let status = tonic_types::pb::Status::decode(bytes.as_slice()).unwrap();
    assert_eq!(status.code, 8);
    assert!(
        status
            .details
            .iter()
            .any(|detail| detail.type_url.ends_with("google.rpc.RetryInfo")),
        "{:?}",
        status.details
    );
}

/// The console is served from the binary at `/` and at its deep links, never cached and
/// under a strict Content-Security-Policy, its assets content-hashed and cached for good;
/// a foreign `Host` is refused as gRPC-Web is; `[console] enabled = false` turns it off
/// while gRPC-Web stays.
#[tokio::test]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let (_llm, server, _client) = start(vec![]).await;
    let get = |path: &str, host: Option<&str>| {
        let mut request = client().get(format!("http://{}{path}", server.addr));
        if let Some(host) = host {
            request = request.header("host", host);
        }
        request.send()
    };
    let page = get("/", None).await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let headers = page.headers().clone();
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(headers["cache-control"], "no-cache");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    let html = page.text().await.unwrap();
    assert!(!html.contains("<script>"), "no inline script");
    let script = html
        .split('"')
        .find(|part| part.starts_with("/assets/app-") && part.ends_with(".js"))
        .expect("the page names its hashed script")
        .to_owned();
    let asset = get(&script, None).await.unwrap();
    assert_eq!(asset.status().as_u16(), 200);
    assert!(asset.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert!(asset.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    for deep in [
        "/runs/01a21dd8-0000-7000-8000-000000000000",
        "/conversations/x",
        "/agents/support",
    ] {
        let page = get(deep, None).await.unwrap();
        assert_eq!(page.status().as_u16(), 200, "{deep}");
        assert_eq!(
            page.text().await.unwrap(),
            html,
            "{deep} is the console's page"
        );
    }
    assert_eq!(
        get("/assets/none.js", None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        get("/", Some("rebound.example"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    assert_eq!(
        get(&script, Some("rebound.example"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );

    let llm = FakeOpenAi::start(vec![]).await;
    let off =
        TestServer::start_edited(&llm.base_url(), |config| config.console.enabled = false).await;
    let page = client()
        .get(format!("http://{}/", off.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 404);
    llm.repeat(Reply::text(&["Still here."], (1, 1)));
    let request = run_request("still", &[]).encode_to_vec();
    let answered = answer(BINARY, run_web(&off, &request, &[]).await).await;
    assert_eq!(answered.grpc_status.as_deref(), Some("0"));
}
