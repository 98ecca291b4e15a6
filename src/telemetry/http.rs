//! `GET /metrics` on a listener of its own, so scrapers never share the gRPC port; other
//! documents (A2A agent cards) may be served beside it by whoever knows them ([`Pages`]).

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Metrics;
use crate::net::{Descriptors, ListenerLimits};

/// Documents served on the metrics listener beside `/metrics`.
#[async_trait::async_trait]
pub trait Pages: Send + Sync {
    /// The answer to `GET path` with `headers`: status, content type and body; `None` when
    /// the path is not one of these pages.
    async fn get(&self, path: &str, headers: &http::HeaderMap) -> Option<Page>;
}

/// One answer of [`Pages`].
pub struct Page {
    /// Its status.
    pub status: StatusCode,
    /// Its content type.
    pub content_type: &'static str,
    /// Its body.
    pub body: String,
}

/// The OpenMetrics text format Prometheus scrapes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `/metrics` on `listener` until `stop` fires: at most `limits.max_connections`
/// connections, each closed when a request head takes longer than
/// `limits.handshake_timeout` to arrive.
pub async fn serve_metrics(
    listener: TcpListener,
    limits: ListenerLimits,
    descriptors: Descriptors,
    metrics: Arc<Metrics>,
    pages: Option<Arc<dyn Pages>>,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    let mut admitted =
        crate::net::accept(listener, limits, descriptors, stop.clone(), &connections);
    while let Some(connection) = admitted.recv().await {
        let metrics = Arc::clone(&metrics);
        let pages = pages.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let metrics = Arc::clone(&metrics);
                let pages = pages.clone();
                async move { Ok::<_, Infallible>(answer(&request, &metrics, pages.as_deref()).await) }
            });
            // The place under the cap is held as long as the connection is served.
            let _place = connection.place;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.handshake_timeout)
                .serve_connection(TokioIo::new(connection.stream), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                result = connection => {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "metrics connection ended");
                    }
                }
            }
        });
    }
    // Each connection ends at `stop`, so this wait is short.
    connections.close();
    connections.wait().await;
}

async fn answer(
    request: &Request<Incoming>,
    metrics: &Metrics,
    pages: Option<&dyn Pages>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if let (Some(pages), &Method::GET) = (pages, request.method()) {
        if path != "/metrics" {
            if let Some(page) = pages.get(path, request.headers()).await {
                return response(page.status, page.content_type, page.body);
            }
        }
    }
    let (status, content_type, body) = match (request.method(), path) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, metrics.render()),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "see /metrics\n".to_owned(),
        ),
    };
    response(status, content_type, body)
}

fn response(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}
