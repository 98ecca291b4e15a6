//! A scripted OpenAI-compatible Chat Completions server on an ephemeral port.
//!
//! It answers each request with the next scripted [`Reply`], speaking the real wire format
//! (SSE `chat.completion.chunk`s, tool-call deltas split across chunks, a usage chunk with
//! empty choices, `data: [DONE]`), and records every request body it received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::mock_llm;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use futures::StreamExt as _;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One tool call as the scripted model streams it.
#[derive(Clone)]
pub struct ScriptedCall {
    pub id: &'static str,
    pub name: &'static str,
    /// The argument text, in the pieces it is streamed in.
    pub argument_chunks: Vec<&'static str>,
}

impl ScriptedCall {
    pub fn new(id: &'static str, name: &'static str, argument_chunks: &[&'static str]) -> Self {
        Self {
            id,
            name,
            argument_chunks: argument_chunks.to_vec(),
        }
    }
}

/// What the server answers to one request.
#[derive(Clone)]
pub enum Reply {
    /// A streamed turn: text pieces, then tool calls, then a usage chunk and `[DONE]`.
    Stream {
        text: Vec<&'static str>,
        calls: Vec<ScriptedCall>,
        usage: (u64, u64),
    },
    /// Streams the text pieces, then breaks the connection.
    DropAfter(Vec<&'static str>),
    /// Streams the text pieces, then stays silent with the connection open.
    Stall(Vec<&'static str>),
    /// A streamed text turn that waits `delay_ms` before every frame.
    Slow {
        text: Vec<&'static str>,
        delay_ms: u64,
    },
    /// A streamed turn of text and tool calls that waits `delay_ms` before every frame.
    SlowCalls {
        text: Vec<&'static str>,
        calls: Vec<ScriptedCall>,
        delay_ms: u64,
    },
    /// An HTTP error with an OpenAI-style error body.
    Error { status: u16, message: &'static str },
    /// Waits `delay_ms` before the response head, then streams the text at once.
    Late {
        delay_ms: u64,
        text: Vec<&'static str>,
    },
    /// One text chunk of `bytes` bytes, then a normal finish.
    Huge { bytes: usize },
    /// An HTTP error carrying a `Retry-After` header.
    Throttle {
        status: u16,
        retry_after: &'static str,
    },
    /// A streamed turn with no usage chunk at all, as llama.cpp and some gateways send.
    NoUsage {
        text: Vec<&'static str>,
        calls: Vec<ScriptedCall>,
    },
    /// Streams the text pieces and a usage chunk, then an error chunk in place of the finish
    /// (as OpenRouter does when the upstream provider fails mid-answer).
    UsageThenError {
        text: Vec<&'static str>,
        usage: (u64, u64),
        message: &'static str,
        /// The error object's `code`, an HTTP status as OpenRouter sends it.
        code: u16,
    },
    /// A streamed text turn whose model first writes `reasoning` as `reasoning_content`
    /// deltas with `"content": null`, as llama.cpp's and vLLM's reasoning parsers send.
    Reasoning {
        reasoning: Vec<&'static str>,
        text: Vec<&'static str>,
        /// Waited before every frame (0: at once).
        delay_ms: u64,
    },
    /// A non-streamed `chat.completion`.
    Completion {
        text: &'static str,
        calls: Vec<ScriptedCall>,
        usage: (u64, u64),
    },
}

impl Reply {
    pub fn text(pieces: &[&'static str], usage: (u64, u64)) -> Self {
        Reply::Stream {
            text: pieces.to_vec(),
            calls: vec![],
            usage,
        }
    }

    pub fn calls(text: &[&'static str], calls: Vec<ScriptedCall>, usage: (u64, u64)) -> Self {
        Reply::Stream {
            text: text.to_vec(),
            calls,
            usage,
        }
    }
}

#[derive(Default)]
struct Script {
    /// Stalled streams whose connection the client has closed.
    closed_stalls: Arc<AtomicUsize>,
    replies: VecDeque<Reply>,
    /// Answered once the script is used up, for models that never stop.
    repeat: Option<Reply>,
    /// Chooses the reply from the request itself, before the script is asked.
    route: Option<fn(&Value) -> Option<Reply>>,
    requests: Vec<Value>,
    /// When each request arrived.
    arrivals: Vec<std::time::Instant>,
    /// The `traceparent` header of each request.
    traceparents: Vec<Option<String>>,
    /// Answer 500 to an assistant message with `"content": null` beside tool calls, as
    /// llama.cpp's server (llama-cpp-python 0.3) does.
    reject_null_content: bool,
}

/// The running server.
#[derive(Clone)]
pub struct FakeOpenAi {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl FakeOpenAi {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let script = Arc::new(Mutex::new(Script {
            replies: replies.into(),
            ..Script::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            // Prompts as large as a run may send (observations of megabytes).
            .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
            .with_state(Arc::clone(&script));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, script }
    }

    /// The API base to configure, e.g. `http://127.0.0.1:1234/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answer every request after the script with `reply`.
    pub fn repeat(&self, reply: Reply) {
        self.script.lock().unwrap().repeat = Some(reply);
    }

    /// Answer each request `route` has a reply for with that reply, whatever its order of
    /// arrival (runs at once: a parent and its children, say).
    pub fn route(&self, route: fn(&Value) -> Option<Reply>) {
        self.script.lock().unwrap().route = Some(route);
    }

    /// Refuse `"content": null` beside tool calls the way llama.cpp's server does.
    pub fn reject_null_content(&self) {
        self.script.lock().unwrap().reject_null_content = true;
    }

    /// How many stalled streams the client has hung up on.
    pub fn closed_stalls(&self) -> usize {
        self.script
            .lock()
            .unwrap()
            .closed_stalls
            .load(Ordering::SeqCst)
    }

    /// The `traceparent` header of each request, in order.
    pub fn traceparents(&self) -> Vec<Option<String>> {
        self.script.lock().unwrap().traceparents.clone()
    }

    /// When each request arrived, in order.
    pub fn arrivals(&self) -> Vec<std::time::Instant> {
        self.script.lock().unwrap().arrivals.clone()
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.script.lock().unwrap().requests.clone()
    }
}

async fn completions(
    State(script): State<Arc<Mutex<Script>>>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let (reply, closed_stalls) = {
        let mut script = script.lock().unwrap();
        script.requests.push(body.clone());
        script.arrivals.push(std::time::Instant::now());
        script.traceparents.push(
            headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        );
        if script.reject_null_content && has_null_content_beside_tool_calls(&body) {
            return error_response(500, "Internal Server Error");
        }
        let routed = script.route.and_then(|route| route(&body));
        let reply = routed
            .or_else(|| script.replies.pop_front())
            .or_else(|| script.repeat.clone());
        (reply, Arc::clone(&script.closed_stalls))
    };
    let model = body["model"].as_str().unwrap_or("model").to_owned();
    match reply {
        None => error_response(500, "the fake server's script is used up"),
        Some(Reply::Error { status, message }) => error_response(status, message),
        Some(Reply::Late { delay_ms, text }) => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            sse(stream_frames(&model, &text, &[], (1, 1)), false)
        }
        Some(Reply::Huge { bytes }) => {
            let text: &'static str = Box::leak("x".repeat(bytes).into_boxed_str());
            sse(stream_frames(&model, &[text], &[], (1, 1)), false)
        }
        Some(Reply::Throttle {
            status,
            retry_after,
        }) => {
            let mut response = error_response(status, "slow down");
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after.parse().unwrap());
            response
        }
        Some(Reply::Completion { text, calls, usage }) => completion(&model, text, &calls, usage),
        Some(Reply::Stream { text, calls, usage }) => {
            let calls = with_file_id(calls, &body);
            sse(stream_frames(&model, &text, &calls, usage), false)
        }
        Some(Reply::Reasoning {
            reasoning,
            text,
            delay_ms,
        }) => {
            let mut frames = stream_frames(&model, &text, &[], (10, 20));
            let thinking = reasoning.iter().map(|piece| {
                let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                    "created": 1, "model": model, "choices": [{"index": 0,
                    "delta": {"content": null, "reasoning_content": piece}, "finish_reason": null}]});
                format!("data: {chunk}\n\n")
            });
            frames.splice(1..1, thinking);
            match delay_ms {
                0 => sse(frames, false),
                delay => paced_sse(frames, delay),
            }
        }
        Some(Reply::Stall(text)) => {
            let frames = stream_frames(&model, &text, &[], (0, 0))[1..text.len() + 1].to_vec();
            stalled_sse(frames, closed_stalls)
        }
        Some(Reply::Slow { text, delay_ms }) => {
            paced_sse(stream_frames(&model, &text, &[], (2, 2)), delay_ms)
        }
        Some(Reply::SlowCalls {
            text,
            calls,
            delay_ms,
        }) => paced_sse(stream_frames(&model, &text, &calls, (2, 2)), delay_ms),
        Some(Reply::NoUsage { text, calls }) => {
            let mut frames = stream_frames(&model, &text, &calls, (0, 0));
            frames.remove(frames.len() - 2);
            sse(frames, false)
        }
        Some(Reply::UsageThenError {
            text,
            usage,
            message,
            code,
        }) => {
            let frames = stream_frames(&model, &text, &[], usage);
            let mut head = frames[..text.len() + 1].to_vec();
            head.push(frames[frames.len() - 2].clone());
            let error = json!({"id": "gen-1", "object": "chat.completion.chunk", "model": model,
                "error": {"code": code, "message": message},
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]});
            head.push(format!("data: {error}\n\n"));
            sse(head, false)
        }
        Some(Reply::DropAfter(text)) => sse(
            stream_frames(&model, &text, &[], (0, 0))[..text.len() + 1].to_vec(),
            true,
        ),
    }
}

/// Writes into `{file}` of the calls' arguments the id of the last file an observation
/// announced (`[file <id>: <name>]`), as a model handing a tool's file on would.
fn with_file_id(calls: Vec<ScriptedCall>, body: &Value) -> Vec<ScriptedCall> {
    let announced = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .filter_map(|text| text.rsplit_once("[file ")?.1.split_once(':'))
        .map(|(id, _)| id.to_owned())
        .next_back();
    let Some(id) = announced else {
        return calls;
    };
    calls
        .into_iter()
        .map(|call| ScriptedCall {
            argument_chunks: call
                .argument_chunks
                .iter()
                .map(|chunk| -> &'static str {
                    Box::leak(chunk.replace("{file}", &id).into_boxed_str())
                })
                .collect(),
            ..call
        })
        .collect()
}

fn has_null_content_beside_tool_calls(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|messages| {
        messages
            .iter()
            .any(|m| m.get("tool_calls").is_some() && m.get("content") == Some(&Value::Null))
    })
}

fn error_response(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap();
    let body = json!({"error": {"message": message, "type": "server_error", "code": null}});
    (status, Json(body)).into_response()
}

/// The frames of a turn, built by the same code the benchmark's mock server uses.
fn stream_frames(
    model: &str,
    text: &[&str],
    calls: &[ScriptedCall],
    usage: (u64, u64),
) -> Vec<String> {
    let calls: Vec<mock_llm::ScriptedCall> = calls
        .iter()
        .map(|call| mock_llm::ScriptedCall {
            id: call.id.to_owned(),
            name: call.name.to_owned(),
            argument_chunks: call
                .argument_chunks
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
        })
        .collect();
    mock_llm::sse_frames(model, text, &calls, usage)
}

fn sse(frames: Vec<String>, break_connection: bool) -> Response {
    let mut items: Vec<Result<Bytes, std::io::Error>> = frames
        .into_iter()
        .map(|frame| Ok(Bytes::from(frame)))
        .collect();
    if break_connection {
        items.push(Err(std::io::Error::other("connection dropped by the test")));
    }
    let stream = futures::stream::iter(items).then(|item| async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        item
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Counts one closed stall when the response body is dropped (the client hung up).
struct HangUp(Arc<AtomicUsize>);

impl Drop for HangUp {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn stalled_sse(frames: Vec<String>, closed: Arc<AtomicUsize>) -> Response {
    let hang_up = HangUp(closed);
    let head = futures::stream::iter(
        frames
            .into_iter()
            .map(|f| Ok::<_, std::io::Error>(Bytes::from(f))),
    );
    let stream = head.chain(futures::stream::pending()).map(move |item| {
        let _alive = &hang_up;
        item
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn paced_sse(frames: Vec<String>, delay_ms: u64) -> Response {
    let stream = futures::stream::iter(frames).then(move |frame| async move {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok::<_, std::io::Error>(Bytes::from(frame))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn completion(model: &str, text: &str, calls: &[ScriptedCall], usage: (u64, u64)) -> Response {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|call| json!({"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.argument_chunks.concat()}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let body = json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    });
    Json(body).into_response()
}
