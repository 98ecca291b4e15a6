//! Tracing for the whole process: log lines, and spans exported over OTLP when the
//! standard `OTEL_EXPORTER_OTLP_*` variables ask for it; W3C trace context taken from
//! callers and handed on to the LLM and tool servers.
//!
//! Spans are `tracing` spans; the OpenTelemetry layer turns them into OTLP spans, named by
//! their `otel.name` field, in a batch exported off the request path. Without an endpoint
//! no exporter exists and nothing is exported.

use std::fmt;

use super::logs::Tagged;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The service name spans carry when `OTEL_SERVICE_NAME` does not give one.
const SERVICE_NAME: &str = "agent-runner";

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol we do not speak.
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL {0:?} is not supported (use grpc or http/protobuf)")]
    Protocol(String),
    /// The exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A global subscriber was already installed.
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
}

/// The process's tracing; [`Tracing::shutdown`] exports what is still batched.
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl Tracing {
    /// Whether spans are exported.
    pub fn exports(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still batched and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(err) = provider.shutdown() {
                tracing::warn!(error = %err, "could not export the last spans");
            }
        }
    }
}

/// Installs the process-wide subscriber: log lines on stderr (`json` or text, filtered by
/// `RUST_LOG`, default `info`) and, when an OTLP endpoint is configured, span export. Must run inside
/// the tokio runtime, which exports the batches. Spans carry `instance` (the replica id) as
/// `service.instance.id` and log lines name it too, so both tell which replica wrote them.
pub fn init(json: bool, instance: &str) -> Result<Tracing, TracingError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let provider = exporter_from_env()?.map(|exporter| {
        SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter, Tokio).build())
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.instance.id",
                        instance.to_owned(),
                    ))
                    .build(),
            )
            .build()
    });
    // Each layer has its own filter: `RUST_LOG` quiets the logs, never the exported spans,
    // which are the service's own at info level.
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SERVICE_NAME))
            .with_filter(Targets::new().with_target("agent_runner", Level::INFO))
    });
    // Logs go to stderr, so a command's own output on stdout stays clean.
    let logs = if json {
        tracing_subscriber::fmt::layer()
            .event_format(Tagged::new(
                tracing_subscriber::fmt::format().json(),
                instance,
                true,
            ))
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .event_format(Tagged::new(
                tracing_subscriber::fmt::format(),
                instance,
                false,
            ))
            .with_writer(super::logs::OneLineStderr)
            .boxed()
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(otel)
        .try_init()?;
    Ok(Tracing { provider })
}

fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| SERVICE_NAME.to_owned())
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// The span exporter the standard variables describe; `None` when no endpoint is set. The
/// exporter reads the endpoint itself (`…_TRACES_ENDPOINT` before `…_ENDPOINT`).
fn exporter_from_env() -> Result<Option<SpanExporter>, TracingError> {
    if env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        && env("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "grpc".to_owned());
    let exporter = match protocol.as_str() {
        "grpc" => SpanExporter::builder().with_tonic().build()?,
        "http/protobuf" => SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()?,
        other => return Err(TracingError::Protocol(other.to_owned())),
    };
    Ok(Some(exporter))
}

/// A caller's W3C trace context: the parent of the run's span.
#[derive(Clone, Default)]
pub struct TraceParent(Context);

impl TraceParent {
    /// The context in a `traceparent` (and `tracestate`) header, if one is there and valid.
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        let context = TraceContextPropagator::new().extract(&HeaderCarrier(headers));
        Self(context)
    }

    /// Whether a caller sent a valid trace context.
    pub fn is_set(&self) -> bool {
        self.0.span().span_context().is_valid()
    }

    /// Makes `span` a child of the caller's span. Without span export there is nothing to
    /// join, which is not an error.
    pub fn adopt(&self, span: &tracing::Span) {
        if self.is_set() {
            let _ = span.set_parent(self.0.clone());
        }
    }

    /// The context as a `traceparent` header value, to keep with a run; `None` when unset.
    pub fn to_header(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        let mut headers = http::HeaderMap::new();
        TraceContextPropagator::new().inject_context(&self.0, &mut HeaderInjector(&mut headers));
        headers
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    }

    /// The context a [`Self::to_header`] value names (unset when it is not valid).
    pub fn from_header(traceparent: &str) -> Self {
        let mut headers = http::HeaderMap::new();
        if let Ok(value) = http::HeaderValue::from_str(traceparent) {
            headers.insert("traceparent", value);
        }
        Self::from_headers(&headers)
    }

    /// The caller's trace id, as 32 hex digits.
    pub fn trace_id(&self) -> Option<String> {
        self.is_set()
            .then(|| self.0.span().span_context().trace_id().to_string())
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({:?})", self.trace_id())
    }
}

impl PartialEq for TraceParent {
    fn eq(&self, other: &Self) -> bool {
        self.0.span().span_context() == other.0.span().span_context()
    }
}

/// The trace id of `span`: its exported trace's when spans are exported, else the
/// caller's, else none. Recorded on the run's span so log lines carry it.
pub fn trace_id(span: &tracing::Span, parent: &TraceParent) -> Option<String> {
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        Some(own.trace_id().to_string())
    } else {
        parent.trace_id()
    }
}

/// Adds the current span's `traceparent` to an outgoing request's headers, so the LLM and
/// tool servers join the trace. Nothing is added when spans are not exported.
pub fn inject_current(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
    }
}

/// `request` with the current span's `traceparent`, when spans are exported.
pub fn traced(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let mut headers = http::HeaderMap::new();
    inject_current(&mut headers);
    if headers.is_empty() {
        request
    } else {
        request.headers(headers)
    }
}

struct HeaderCarrier<'a>(&'a http::HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_header_is_read_and_a_bad_one_ignored() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        let parent = TraceParent::from_headers(&headers);
        assert_eq!(
            parent.trace_id().as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        headers.insert("traceparent", "garbage".parse().unwrap());
        assert!(!TraceParent::from_headers(&headers).is_set());
        assert!(!TraceParent::default().is_set());
    }
}
