//! An OTLP/gRPC trace receiver that counts what it gets, so a benchmark can measure the
//! service with span export on, against a real collector endpoint.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// The running receiver.
pub struct Sink {
    addr: SocketAddr,
    spans: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Counter(Arc<AtomicUsize>);

#[tonic::async_trait]
impl TraceService for Counter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Sink {
    /// Listens on an ephemeral loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(AtomicUsize::new(0));
        let service = TraceServiceServer::new(Counter(Arc::clone(&spans)));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Ok(Self { addr, spans })
    }

    /// What the service's environment needs to export here.
    pub fn service_env(&self) -> Vec<(String, String)> {
        vec![(
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            format!("http://{}", self.addr),
        )]
    }

    /// Spans received so far.
    pub fn spans(&self) -> usize {
        self.spans.load(Ordering::Relaxed)
    }
}
