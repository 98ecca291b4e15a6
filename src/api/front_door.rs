//! The main port's front door: what a browser meets before the gRPC services.
//!
//! Native gRPC (HTTP/2, `application/grpc`) walks straight through. Everything else —
//! gRPC-Web, pages such as the A2A agent cards — is first checked against DNS rebinding
//! (with API keys off, only loopback hosts and `[server] allowed_hosts` are answered),
//! then given CORS headers when it comes from a listed origin. A `POST` that is not gRPC is
//! refused `415` rather than handed to a service that cannot read it.

use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, Either};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use tonic::body::Body;
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, Cors, CorsLayer};

use super::auth::TENANT_HEADER;
use crate::telemetry::Pages;

/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// Request headers the API reads, which a listed origin's pages may send.
const REQUEST_HEADERS: [&str; 7] = [
    "authorization",
    TENANT_HEADER,
    "x-grpc-web",
    "grpc-timeout",
    "content-type",
    "x-user-agent",
    "traceparent",
];

/// Response headers a gRPC-Web client reads when the status comes without a body.
const EXPOSED_HEADERS: [&str; 3] = ["grpc-status", "grpc-message", "grpc-status-details-bin"];

/// Which browsers the front door answers.
#[derive(Clone, Debug, Default)]
pub struct BrowserSettings {
    /// Origins whose pages may call (CORS); `*` for any.
    pub cors_origins: Vec<String>,
    /// With API keys off, the hosts besides loopback ones a request may name; `None` when
    /// keys are on and any host may be named.
    pub allowed_hosts: Option<Vec<String>>,
    /// Whether the browser console is served.
    pub console: bool,
}

/// Puts the [`FrontDoor`] before the API's services.
#[derive(Clone)]
pub struct FrontDoorLayer {
    settings: Arc<BrowserSettings>,
    pages: Option<Arc<dyn Pages>>,
}

impl FrontDoorLayer {
    /// A front door answering browsers as `settings` say, serving `pages` for `GET`.
    pub fn new(settings: BrowserSettings, pages: Option<Arc<dyn Pages>>) -> Self {
        Self {
            settings: Arc::new(settings),
            pages,
        }
    }
}

impl<S: Clone> Layer<S> for FrontDoorLayer {
    type Service = FrontDoor<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FrontDoor {
            cors: cors_layer(&self.settings.cors_origins).layer(inner.clone()),
            plain: inner,
            settings: Arc::clone(&self.settings),
            pages: self.pages.clone(),
        }
    }
}

/// See the module's doc.
#[derive(Clone)]
pub struct FrontDoor<S> {
    plain: S,
    cors: Cors<S>,
    settings: Arc<BrowserSettings>,
    pages: Option<Arc<dyn Pages>>,
}

/// What the front door decided for one request.
enum Way {
    /// On to the services as it is.
    Plain,
    /// On to the services with CORS headers (or a preflight's answer).
    Cors,
    /// A page the front door serves itself.
    Page,
    /// Refused with this status and reason.
    Refused(StatusCode, &'static str),
}

impl<S> Service<Request<Body>> for FrontDoor<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Either<
        Either<S::Future, tower_http::cors::ResponseFuture<S::Future>>,
        BoxFuture<'static, Result<Response<Body>, S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.plain.poll_ready(cx))?;
        self.cors.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match self.way(&request) {
            Way::Plain => Either::Left(Either::Left(self.plain.call(request))),
            Way::Cors => Either::Left(Either::Right(self.cors.call(request))),
            Way::Page => {
                let console = self.settings.console;
                let pages = self.pages.clone();
                Either::Right(Box::pin(async move {
                    let path = request.uri().path();
                    let answer = console
                        .then(|| super::console::answer(path, request.method()))
                        .flatten();
                    match answer {
                        Some(answer) => Ok(answer),
                        None => Ok(page(pages, request).await),
                    }
                }))
            }
            Way::Refused(status, reason) => {
                Either::Right(Box::pin(async move { Ok(plain_text(status, reason)) }))
            }
        }
    }
}

impl<S> FrontDoor<S> {
    fn way(&self, request: &Request<Body>) -> Way {
        if is_native_grpc(request) {
            return Way::Plain;
        }
        if let Some(allowed) = &self.settings.allowed_hosts {
            if !host_allowed(request, allowed) {
                return Way::Refused(
                    StatusCode::FORBIDDEN,
                    "this host is not served while API keys are off: browse to a loopback \
                     address, or list the host in [server] allowed_hosts\n",
                );
            }
        }
        let listed = request
            .headers()
            .get(header::ORIGIN)
            .is_some_and(|origin| self.origin_listed(origin));
        match *request.method() {
            Method::GET | Method::HEAD => Way::Page,
            Method::POST if !is_grpc(request) => Way::Refused(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "only gRPC and gRPC-Web requests are served here (content-type \
                 application/grpc-web+proto or application/grpc-web-text)\n",
            ),
            Method::OPTIONS if !listed => {
                Way::Refused(StatusCode::FORBIDDEN, "this origin may not call the API\n")
            }
            _ if listed => Way::Cors,
            _ => Way::Plain,
        }
    }

    fn origin_listed(&self, origin: &HeaderValue) -> bool {
        self.settings
            .cors_origins
            .iter()
            .any(|listed| listed == "*" || listed.as_bytes() == origin.as_bytes())
    }
}

/// CORS for the listed origins: the headers the API reads may be sent, its status headers
/// may be read.
fn cors_layer(origins: &[String]) -> CorsLayer {
    let allow = if origins.iter().any(|origin| origin == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|origin| HeaderValue::from_str(origin).ok()),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::POST, Method::GET])
        .allow_headers(REQUEST_HEADERS.map(HeaderName::from_static))
        .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
        .max_age(PREFLIGHT_MAX_AGE)
}

/// HTTP/2 with a gRPC (not gRPC-Web) content type: what no browser can send in plain text,
/// and what a TLS certificate check protects otherwise.
fn is_native_grpc(request: &Request<Body>) -> bool {
    request.version() == Version::HTTP_2
        && content_type(request)
            .is_some_and(|kind| kind.starts_with("application/grpc") && !is_web(kind))
}

fn is_grpc(request: &Request<Body>) -> bool {
    content_type(request).is_some_and(|kind| kind.starts_with("application/grpc"))
}

fn is_web(kind: &str) -> bool {
    kind.starts_with("application/grpc-web")
}

fn content_type(request: &Request<Body>) -> Option<&str> {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
}

/// Whether the host the request names (its authority, else its `Host`) is a loopback name
/// or address, or one of `allowed`. A request naming none is refused: every browser names
/// one.
fn host_allowed(request: &Request<Body>, allowed: &[String]) -> bool {
    let named = match request.uri().authority() {
        Some(authority) => Some(authority.host().to_owned()),
        None => request
            .headers()
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<http::uri::Authority>().ok())
            .map(|authority| authority.host().to_owned()),
    };
    let Some(host) = named else {
        return false;
    };
    is_loopback(&host)
        || allowed
            .iter()
            .any(|listed| unbracketed(listed).eq_ignore_ascii_case(unbracketed(&host)))
}

/// An IPv6 address as written in a URL (`[::1]`) without its brackets.
fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(host)
}

/// `localhost`, a name under it (RFC 6761), or a loopback address.
fn is_loopback(host: &str) -> bool {
    let lower = host.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    unbracketed(host)
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// The page `request` asks for, or `404`.
async fn page(pages: Option<Arc<dyn Pages>>, request: Request<Body>) -> Response<Body> {
    let found = match &pages {
        Some(pages) => pages.get(request.uri().path(), request.headers()).await,
        None => None,
    };
    let Some(found) = found else {
        return plain_text(StatusCode::NOT_FOUND, "no such page\n");
    };
    let mut response = Response::new(match *request.method() {
        Method::HEAD => Body::empty(),
        _ => Body::new(http_body_util::Full::new(hyper::body::Bytes::from(
            found.body,
        ))),
    });
    *response.status_mut() = found.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(found.content_type),
    );
    response
}

fn plain_text(status: StatusCode, reason: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::new(http_body_util::Full::new(
        hyper::body::Bytes::from_static(reason.as_bytes()),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, method: Method, host: &str, kind: &str) -> Request<Body> {
        Request::builder()
            .version(version)
            .method(method)
            .uri("/agentrunner.v1.AgentService/Run")
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, kind)
            .body(Body::empty())
            .unwrap()
    }

    fn door(origins: &[&str], hosts: Option<&[&str]>) -> FrontDoor<()> {
        let settings = Arc::new(BrowserSettings {
            cors_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            allowed_hosts: hosts.map(|h| h.iter().map(|h| (*h).to_owned()).collect()),
            console: false,
        });
        FrontDoor {
            plain: (),
            cors: cors_layer(&settings.cors_origins).layer(()),
            settings,
            pages: None,
        }
    }

    #[test]
    fn loopback_names_and_addresses_are_loopback() {
        for host in [
            "localhost",
            "LOCALHOST",
            "app.localhost",
            "127.0.0.1",
            "127.9.9.9",
            "[::1]",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "example.com",
            "localhost.example.com",
            "10.0.0.1",
            "[::2]",
            "",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn with_keys_off_a_foreign_host_is_refused_but_native_grpc_is_not() {
        let door = door(&[], Some(&["runner.internal"]));
        let web = "application/grpc-web+proto";
        let foreign = request(Version::HTTP_11, Method::POST, "evil.example:80", web);
        assert!(matches!(
            door.way(&foreign),
            Way::Refused(StatusCode::FORBIDDEN, _)
        ));
        let listed = request(Version::HTTP_11, Method::POST, "Runner.Internal:8080", web);
        assert!(matches!(door.way(&listed), Way::Plain));
        let local = request(Version::HTTP_11, Method::POST, "127.0.0.1:50051", web);
        assert!(matches!(door.way(&local), Way::Plain));
        let native = request(
            Version::HTTP_2,
            Method::POST,
            "evil.example",
            "application/grpc",
        );
        assert!(matches!(door.way(&native), Way::Plain));
        let keys_on = self::door(&[], None);
        assert!(matches!(keys_on.way(&foreign), Way::Plain));
    }

    #[test]
    fn only_listed_origins_go_through_cors_and_other_posts_are_415() {
        let door = door(&["https://app.example.com"], None);
        let from = |origin: &str, method: Method, kind: &str| {
            let mut request = request(Version::HTTP_11, method, "localhost", kind);
            request
                .headers_mut()
                .insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            door.way(&request)
        };
        let web = "application/grpc-web-text";
        assert!(matches!(
            from("https://app.example.com", Method::POST, web),
            Way::Cors
        ));
        assert!(matches!(
            from("https://app.example.com", Method::OPTIONS, ""),
            Way::Cors
        ));
        assert!(matches!(
            from("https://other.example", Method::POST, web),
            Way::Plain
        ));
        assert!(matches!(
            from("https://other.example", Method::OPTIONS, ""),
            Way::Refused(StatusCode::FORBIDDEN, _)
        ));
        assert!(matches!(
            from("https://app.example.com", Method::POST, "application/json"),
            Way::Refused(StatusCode::UNSUPPORTED_MEDIA_TYPE, _)
        ));
        assert!(matches!(
            from("https://app.example.com", Method::GET, ""),
            Way::Page
        ));
    }
}
