//! The browser console, built from `console/` into `console/dist/` and embedded in the
//! binary: its page for `/` and every deep link, and its assets under `/assets/`.
//!
//! The page is never cached (it names the assets of this build) and carries a strict
//! Content-Security-Policy: scripts, styles and calls from this origin only, no inline
//! script, no framing. Assets carry a content hash in their names and are cached for good.

use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use rust_embed::RustEmbed;
use tonic::body::Body;

/// The built console.
#[derive(RustEmbed)]
#[folder = "console/dist/"]
struct Built;

/// What the page may load and call: this origin alone.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Where the page's assets are served.
const ASSETS: &str = "/assets/";

/// The console's answer to `GET path` (or `HEAD`), or `None` when the path is none of its
/// pages or assets (other pages, such as agent cards, may answer it).
pub fn answer(path: &str, method: &Method) -> Option<Response<Body>> {
    let (name, page) = match path.strip_prefix(ASSETS) {
        Some(asset) => (format!("assets/{asset}"), false),
        None if is_page(path) => ("index.html".to_owned(), true),
        None => return None,
    };
    let file = Built::get(&name)?;
    let body = match *method {
        Method::HEAD => Body::empty(),
        _ => Body::new(http_body_util::Full::new(match file.data {
            std::borrow::Cow::Borrowed(bytes) => hyper::body::Bytes::from_static(bytes),
            std::borrow::Cow::Owned(bytes) => hyper::body::Bytes::from(bytes),
        })),
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type(&name));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if page {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    } else {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
    }
    Some(response)
}

/// `/`, or a deep link the console draws: `/runs/{id}`, `/conversations/{id}`,
/// `/agents` and `/agents/{id}`, and `/operator`.
fn is_page(path: &str) -> bool {
    if matches!(path, "/" | "/operator" | "/agents" | "/agents/") {
        return true;
    }
    let mut parts = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some("runs" | "conversations" | "agents"), Some(id), None) if !id.is_empty()
    )
}

fn content_type(name: &str) -> HeaderValue {
    let kind = match name.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    };
    HeaderValue::from_static(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_links_are_pages_and_card_paths_are_not() {
        for page in [
            "/",
            "/runs/abc",
            "/conversations/abc/",
            "/agents/support",
            "/operator",
        ] {
            assert!(is_page(page), "{page}");
        }
        for other in [
            "/runs",
            "/runs/",
            "/agents/support/.well-known/agent-card.json",
            "/agentrunner.v1.AgentService/Run",
            "/favicon.ico",
        ] {
            assert!(!is_page(other), "{other}");
        }
    }

    #[test]
    fn the_page_is_never_cached_and_may_not_be_framed() {
        let page = answer("/runs/x", &Method::GET).unwrap();
        assert_eq!(page.headers()[header::CACHE_CONTROL], "no-cache");
        let policy = page.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(policy.contains("frame-ancestors 'none'") && policy.contains("script-src 'self'"));
        assert!(!policy.contains("unsafe-inline"));
        assert!(answer("/assets/none-such.js", &Method::GET).is_none());
    }
}
