//! A scripted Anthropic Messages server on an ephemeral port.
//!
//! Each request to `/v1/messages` is answered with the next scripted [`Turn`]: a recorded
//! transcript of the real event stream (`event:` and `data:` lines, pings, blocks whose
//! deltas interleave), sent in small pieces that cut lines and frames at arbitrary points,
//! or an HTTP error with Anthropic's error body. It records each request's body and headers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt as _;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// Recorded event streams, written from the examples of Anthropic's API reference.
pub mod transcripts {
    pub const TEXT: &str = include_str!("../transcripts/anthropic/text.sse");
    pub const TOOL_USE: &str = include_str!("../transcripts/anthropic/tool_use.sse");
    pub const ANSWER_AFTER_TOOL: &str =
        include_str!("../transcripts/anthropic/answer_after_tool.sse");
    pub const PARALLEL_TOOLS: &str = include_str!("../transcripts/anthropic/parallel_tools.sse");
    pub const TOOL_WITHOUT_INPUT: &str =
        include_str!("../transcripts/anthropic/tool_without_input.sse");
    pub const THINKING_THEN_TOOL: &str =
        include_str!("../transcripts/anthropic/thinking_then_tool.sse");
    pub const THINKING_THEN_ANSWER: &str =
        include_str!("../transcripts/anthropic/thinking_then_answer.sse");
    pub const OVERLOADED_MIDSTREAM: &str =
        include_str!("../transcripts/anthropic/overloaded_midstream.sse");
    pub const REACT_ACTION: &str = include_str!("../transcripts/anthropic/react_action.sse");
    pub const REACT_ANSWER: &str = include_str!("../transcripts/anthropic/react_answer.sse");
}

/// What the server answers to one request.
#[derive(Clone)]
pub enum Turn {
    /// A recorded event stream.
    Stream(&'static str),
    /// An event stream sent one event at a time, `delay_ms` before each.
    Paced { events: String, delay_ms: u64 },
    /// An HTTP error with Anthropic's error body.
    Error {
        status: u16,
        kind: &'static str,
        message: &'static str,
    },
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: Value,
    pub api_key: Option<String>,
    pub version: Option<String>,
}

#[derive(Default)]
struct Script {
    turns: VecDeque<Turn>,
    received: Vec<Received>,
}

/// The running server.
#[derive(Clone)]
pub struct FakeAnthropic {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl FakeAnthropic {
    pub async fn start(turns: Vec<Turn>) -> Self {
        let script = Arc::new(Mutex::new(Script {
            turns: turns.into(),
            ..Script::default()
        }));
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(Arc::clone(&script));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, script }
    }

    /// The `base_url` to configure (the client adds `/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.script.lock().unwrap().received.clone()
    }
}

async fn messages(
    State(script): State<Arc<Mutex<Script>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let turn = {
        let mut script = script.lock().unwrap();
        script.received.push(Received {
            body,
            api_key: header("x-api-key"),
            version: header("anthropic-version"),
        });
        script.turns.pop_front()
    };
    match turn {
        Some(Turn::Stream(transcript)) => event_stream(transcript),
        Some(Turn::Paced { events, delay_ms }) => paced_stream(events, delay_ms),
        Some(Turn::Error {
            status,
            kind,
            message,
        }) => error(status, kind, message),
        None => error(500, "api_error", "the script is used up"),
    }
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

/// The events of `transcript` one at a time, `delay_ms` before each.
fn paced_stream(transcript: String, delay_ms: u64) -> Response {
    let events: Vec<String> = transcript
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    let stream = futures::stream::iter(events).then(move |event| async move {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok::<_, std::io::Error>(Bytes::from(event))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// The transcript in pieces of 7 to 60 bytes, so lines and frames arrive cut anywhere.
fn event_stream(transcript: &'static str) -> Response {
    let bytes = transcript.as_bytes();
    let mut pieces = Vec::new();
    let mut at = 0;
    let mut size = 7;
    while at < bytes.len() {
        let end = (at + size).min(bytes.len());
        pieces.push(Ok::<_, std::io::Error>(Bytes::copy_from_slice(
            &bytes[at..end],
        )));
        at = end;
        size = 7 + (size * 13) % 54;
    }
    let stream = futures::stream::iter(pieces).then(|piece| async move {
        tokio::time::sleep(Duration::from_micros(200)).await;
        piece
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}
