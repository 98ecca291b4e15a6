//! Reading a tool server's answer within a limit, and describing transport failures without
//! the URL (which may carry a credential in its query).
//!
//! A server can answer with any number of bytes; a tool reads only what it can use (the
//! observation's worth of text, or a file up to its cap) and then stops, closing the
//! connection, so one call never holds more than the limit in memory.

use futures::StreamExt;

use super::ToolError;

/// An answer read up to a limit.
#[derive(Debug)]
pub struct Limited {
    /// The bytes read, at most the limit.
    pub bytes: Vec<u8>,
    /// Whether the body had more than that.
    pub cut: bool,
    /// The body's length when the server declared it.
    pub declared: Option<u64>,
}

/// Reads at most `limit` bytes of `response`'s body, then stops reading.
pub async fn read_limited(response: reqwest::Response, limit: usize) -> Result<Limited, ToolError> {
    let declared = response.content_length();
    let mut bytes = Vec::with_capacity(declared.map_or(0, |n| n.min(limit as u64) as usize));
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|err| transport("reading the answer failed", err))?;
        let room = limit - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Limited {
                bytes,
                cut: true,
                declared,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Limited {
        bytes,
        cut: false,
        declared,
    })
}

/// A transport failure as a tool error, saying what failed but never the URL.
pub fn transport(what: &str, err: reqwest::Error) -> ToolError {
    let kind = if err.is_timeout() {
        " (timed out)"
    } else if err.is_connect() {
        " (could not connect)"
    } else {
        ""
    };
    let err = err.without_url();
    let mut detail = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    ToolError::Failed(format!("{what}{kind}: {detail}"))
}

/// `url` without what may identify or authenticate: user, password, path, query.
pub fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => format!(
            "{}://{}",
            url.scheme(),
            url.host_str()
                .map_or_else(String::new, |host| match url.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host.to_owned(),
                })
        ),
        Err(_) => "the configured URL".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_url_keeps_only_scheme_host_and_port() {
        assert_eq!(
            redacted("https://user:pw@api.example.com:8443/v1/mcp?token=s3cret"),
            "https://api.example.com:8443"
        );
        assert_eq!(redacted("not a url s3cret"), "the configured URL");
    }
}
