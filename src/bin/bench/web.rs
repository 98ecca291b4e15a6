//! The gRPC-Web cases: runs made as a browser makes them, over HTTP/1.1 in gRPC-Web's
//! binary framing (one connection per stream in flight, as HTTP/1.1 allows), read frame by
//! frame as they arrive.

use std::time::Instant;

use agent_runner::pb;
use futures::StreamExt;
use prost::Message as _;

use crate::workload::{bench_request, RunResult};

/// A flag byte and a four-byte length precede every frame.
const FRAME_HEAD: usize = 5;

/// The HTTP/1.1 client of a case: as many connections kept as streams run at once.
pub fn client(concurrency: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(concurrency)
        .build()?)
}

/// One `Run` over gRPC-Web: ok when its events arrive gap-free in `seq` order, end with
/// `STOP`, and the trailers say `grpc-status: 0`.
pub async fn one_run(http: &reqwest::Client, url: &str, authorization: Option<&str>) -> RunResult {
    let started = Instant::now();
    let mut result = RunResult::new();
    let body = bench_request().encode_to_vec();
    let mut framed = Vec::with_capacity(FRAME_HEAD + body.len());
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    framed.extend_from_slice(&body);
    let mut request = http
        .post(url)
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .body(framed);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let Ok(response) = request.send().await else {
        return result;
    };
    let mut chunks = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut last_seq = 0;
    let mut in_order = true;
    let mut status_ok = false;
    while let Some(Ok(chunk)) = chunks.next().await {
        pending.extend_from_slice(&chunk);
        while let Some((flag, payload)) = take_frame(&mut pending) {
            if flag & 0x80 != 0 {
                status_ok = String::from_utf8_lossy(&payload)
                    .lines()
                    .any(|line| line.trim() == "grpc-status:0" || line.trim() == "grpc-status: 0");
                continue;
            }
            let Ok(event) = pb::RunEvent::decode(payload.as_slice()) else {
                return result;
            };
            in_order &= event.seq == last_seq + 1;
            last_seq = event.seq;
            result.note(started, event.event);
        }
    }
    result.latency = started.elapsed();
    result.ok &= in_order && status_ok && pending.is_empty();
    result
}

/// The first whole frame of `pending`, taken off it: its flag and payload.
fn take_frame(pending: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    let head = pending.get(..FRAME_HEAD)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if pending.len() < FRAME_HEAD + len {
        return None;
    }
    let flag = pending[0];
    let payload = pending[FRAME_HEAD..FRAME_HEAD + len].to_vec();
    pending.drain(..FRAME_HEAD + len);
    Some((flag, payload))
}
