//! API providers: each operation of an OpenAPI document becomes a tool that calls the API
//! over HTTP. The response (text or JSON) is the observation, cut at a size limit with a
//! marker; a non-2xx answer is a failure whose observation carries the status.

mod body;
pub mod openapi;
mod serialize;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use self::openapi::{ApiKeyScheme, Location, Operation, Parameter};
use super::{http_body, ErasedTool, ToolDescriptor, ToolError, ToolOutput};

/// How calls authenticate, from the provider's credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    None,
    /// An API key in a header or the query string.
    ApiKey {
        /// Header or query.
        location: Location,
        /// Header or parameter name.
        name: String,
        /// The key.
        value: String,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::ApiKey { name, .. } => write!(f, "ApiKey({name}: ***)"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}: ***)"),
        }
    }
}

/// Credential keys an API provider understands.
pub const CREDENTIAL_KEYS: [&str; 6] = [
    "api_key",
    "api_key_header",
    "api_key_query",
    "bearer_token",
    "username",
    "password",
];

impl Auth {
    /// Reads credentials: `api_key` (placed by `api_key_header` / `api_key_query`, else by
    /// the document's `apiKey` scheme, else in `X-API-Key`), `bearer_token`, or
    /// `username` and `password`.
    pub fn from_credentials(
        credentials: &BTreeMap<String, String>,
        scheme: Option<&ApiKeyScheme>,
    ) -> Self {
        if let Some(value) = credentials.get("api_key") {
            let (location, name) = if let Some(name) = credentials.get("api_key_header") {
                (Location::Header, name.clone())
            } else if let Some(name) = credentials.get("api_key_query") {
                (Location::Query, name.clone())
            } else if let Some(scheme) = scheme {
                (scheme.location, scheme.name.clone())
            } else {
                (Location::Header, "X-API-Key".to_owned())
            };
            return Auth::ApiKey {
                location,
                name,
                value: value.clone(),
            };
        }
        if let Some(token) = credentials.get("bearer_token") {
            return Auth::Bearer(token.clone());
        }
        match (credentials.get("username"), credentials.get("password")) {
            (Some(username), password) => Auth::Basic {
                username: username.clone(),
                password: password.cloned().unwrap_or_default(),
            },
            (None, _) => Auth::None,
        }
    }
}

/// Settings shared by a provider's operations.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// The API's base URL.
    pub base_url: String,
    /// How to authenticate.
    pub auth: Auth,
    /// Longest observation, in bytes.
    pub max_output_bytes: usize,
    /// Largest file a call may return, in bytes.
    pub max_file_bytes: usize,
}

/// One operation as a tool.
pub struct OperationTool {
    descriptor: ToolDescriptor,
    operation: Operation,
    settings: Arc<ApiSettings>,
    http: reqwest::Client,
}

impl OperationTool {
    /// The tool for `operation` of provider `provider`.
    pub fn new(
        provider: &str,
        operation: Operation,
        settings: Arc<ApiSettings>,
        http: reqwest::Client,
    ) -> Self {
        let descriptor = ToolDescriptor {
            provider: provider.to_owned(),
            name: operation.name.clone(),
            original_name: operation.original_name.clone(),
            file_fields: match operation.body.as_ref().map(|body| &body.media) {
                Some(openapi::Media::Multipart { files }) => files.clone(),
                Some(openapi::Media::Json | openapi::Media::Form) | None => Vec::new(),
            },
            description: operation.description.clone(),
            parameters: operation.schema.clone(),
            idempotent: operation.idempotent,
        };
        Self {
            descriptor,
            operation,
            settings,
            http,
        }
    }

    /// The value of parameter `name`, if given and not null.
    fn given<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
        args.get(name).filter(|value| !value.is_null())
    }

    /// Refuses a call that leaves out (or nulls) a required parameter, before any request.
    fn check_required(&self, args: &Map<String, Value>) -> Result<(), ToolError> {
        let missing: Vec<&str> = self
            .operation
            .parameters
            .iter()
            .filter(|p| p.required && Self::given(args, &p.name).is_none())
            .map(|p| p.name.as_str())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ToolError::InvalidArguments(format!(
                "{} is required and must not be null",
                missing.join(", ")
            )))
        }
    }

    fn url(&self, args: &Map<String, Value>) -> Result<reqwest::Url, ToolError> {
        let mut url = reqwest::Url::parse(&self.settings.base_url).map_err(|err| {
            ToolError::Failed(format!(
                "bad server URL {:?}: {err}",
                self.settings.base_url
            ))
        })?;
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|()| ToolError::Failed("the server URL cannot have a path".to_owned()))?;
            segments.pop_if_empty();
            for segment in self.operation.path.split('/').filter(|s| !s.is_empty()) {
                match segment
                    .strip_prefix('{')
                    .and_then(|s| s.strip_suffix('}'))
                    .and_then(|name| self.parameter(name, Location::Path))
                {
                    Some(parameter) => {
                        let value = Self::given(args, &parameter.name).unwrap_or(&Value::Null);
                        segments.push(&serialize::segment(parameter, value))
                    }
                    None => segments.push(segment),
                };
            }
        }
        let mut pairs = Vec::new();
        for parameter in self.located(Location::Query) {
            if let Some(value) = Self::given(args, &parameter.name) {
                pairs.extend(serialize::pairs(parameter, value));
            }
        }
        if let Auth::ApiKey {
            location: Location::Query,
            name,
            value,
        } = self.auth()
        {
            pairs.push((name.clone(), value.clone()));
        }
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        Ok(url)
    }

    fn parameter(&self, name: &str, location: Location) -> Option<&Parameter> {
        self.operation
            .parameters
            .iter()
            .find(|p| p.name == name && p.location == location)
    }

    fn located(&self, location: Location) -> impl Iterator<Item = &Parameter> {
        self.operation
            .parameters
            .iter()
            .filter(move |p| p.location == location)
    }

    /// The credentials this operation sends: none when its `security` says it is public.
    fn auth(&self) -> &Auth {
        if self.operation.sends_credentials {
            &self.settings.auth
        } else {
            &Auth::None
        }
    }

    fn request(&self, args: &Map<String, Value>) -> Result<reqwest::RequestBuilder, ToolError> {
        self.check_required(args)?;
        let method = reqwest::Method::from_bytes(self.operation.method.as_bytes())
            .map_err(|_| ToolError::Failed(format!("unknown method {}", self.operation.method)))?;
        let mut request = self.http.request(method, self.url(args)?);
        if let Some(key) = super::call_key() {
            // The same on every attempt at the call, a remade one after a takeover too, so
            // a server that honours it applies the call once.
            request = request.header("Idempotency-Key", key);
        }
        for parameter in self.located(Location::Header) {
            if let Some(value) = Self::given(args, &parameter.name) {
                request = request.header(
                    parameter.name.as_str(),
                    serialize::segment(parameter, value),
                );
            }
        }
        let cookies: Vec<String> = self
            .located(Location::Cookie)
            .filter_map(|parameter| {
                let value = Self::given(args, &parameter.name)?;
                let pairs = serialize::pairs(parameter, value);
                Some(
                    pairs
                        .into_iter()
                        .map(|(name, value)| format!("{name}={value}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })
            .collect();
        if !cookies.is_empty() {
            request = request.header(reqwest::header::COOKIE, cookies.join("; "));
        }
        request = match self.auth() {
            Auth::ApiKey {
                location: Location::Header,
                name,
                value,
            } => request.header(name.as_str(), value),
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { username, password } => request.basic_auth(username, Some(password)),
            Auth::ApiKey { .. } | Auth::None => request,
        };
        match &self.operation.body {
            Some(body) => body::attach(request, body, args),
            None => Ok(request),
        }
    }
}

fn file_too_large(limit: usize) -> ToolError {
    ToolError::Failed(format!(
        "the tool returned a file larger than {limit} bytes (runner.tool_file_limit_bytes)"
    ))
}

/// A body read up to one byte past `limit`, as observation text: cut to the limit with a
/// marker when there was more.
fn cut_text(body: &http_body::Limited, limit: usize) -> String {
    let text = String::from_utf8_lossy(&body.bytes).into_owned();
    if !body.cut && text.len() <= limit {
        return text;
    }
    let mut cut = limit.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let total = body
        .declared
        .map_or_else(|| format!("more than {limit}"), |n| n.to_string());
    format!(
        "{}\n[output truncated: {cut} of {total} bytes shown]",
        &text[..cut]
    )
}

/// Cuts `text` to at most `limit` bytes (at a character boundary), saying so.
pub fn truncate_output(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[output truncated: {cut} of {} bytes shown]",
        &text[..cut],
        text.len()
    )
}

impl OperationTool {
    /// A binary answer goes to the user as a file; the model is told it was sent.
    fn file_output(&self, mime_type: String, bytes: Vec<u8>) -> ToolOutput {
        let name = format!(
            "{}.{}",
            self.operation.name,
            super::extension_for(&mime_type)
        );
        ToolOutput {
            text: format!(
                "The tool returned a file, {name} ({mime_type}, {} bytes); it has been sent to the user.",
                bytes.len()
            ),
            files: vec![super::ToolFile {
                name,
                mime_type,
                content: super::FileContent::Bytes(bytes),
            }],
            resources: Vec::new(),
        }
    }
}

/// Whether a response is a file rather than text the model can read.
fn is_binary(mime_type: &str) -> bool {
    let textual = mime_type.is_empty()
        || mime_type.starts_with("text/")
        || mime_type.contains("json")
        || mime_type.contains("xml")
        || mime_type.contains("yaml")
        || mime_type == "application/x-www-form-urlencoded";
    !textual
}

#[async_trait::async_trait]
impl ErasedTool for OperationTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let response = crate::telemetry::traces::traced(self.request(&arguments)?)
            .send()
            .await
            .map_err(|err| http_body::transport("request failed", err))?;
        let status = response.status();
        let mime_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or_default().trim().to_owned())
            .unwrap_or_default();
        if status.is_success() && is_binary(&mime_type) {
            let limit = self.settings.max_file_bytes;
            if response.content_length().is_some_and(|n| n > limit as u64) {
                return Err(file_too_large(limit));
            }
            let file = http_body::read_limited(response, limit).await?;
            if file.cut {
                return Err(file_too_large(limit));
            }
            return Ok(self.file_output(mime_type, file.bytes));
        }
        // Read one byte past the limit to know whether there was more.
        let limit = self.settings.max_output_bytes;
        let body = http_body::read_limited(response, limit.saturating_add(1)).await?;
        let text = cut_text(&body, limit);
        if status.is_success() && text.trim().is_empty() {
            // An empty string would read as if the call did nothing; say what came back.
            Ok(format!("HTTP {}, no content", status.as_u16()).into())
        } else if status.is_success() {
            Ok(text.into())
        } else {
            Err(ToolError::Failed(format!("HTTP {status}: {text}")))
        }
    }
}

/// The tools of an API document.
pub fn operation_tools(
    provider: &str,
    operations: Vec<Operation>,
    settings: ApiSettings,
    http: &reqwest::Client,
) -> Vec<Arc<dyn ErasedTool>> {
    let settings = Arc::new(settings);
    operations
        .into_iter()
        .map(|op| {
            Arc::new(OperationTool::new(
                provider,
                op,
                Arc::clone(&settings),
                http.clone(),
            )) as Arc<dyn ErasedTool>
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_is_cut_with_a_marker() {
        let cut = truncate_output("é".repeat(10), 5);
        assert_eq!(cut, "éé\n[output truncated: 4 of 20 bytes shown]");
        assert_eq!(truncate_output("short".into(), 10), "short");
    }

    #[test]
    fn credentials_pick_the_documented_api_key_place() {
        let scheme = ApiKeyScheme {
            location: Location::Query,
            name: "key".into(),
        };
        let creds = BTreeMap::from([("api_key".to_owned(), "s3cret".to_owned())]);
        assert_eq!(
            Auth::from_credentials(&creds, Some(&scheme)),
            Auth::ApiKey {
                location: Location::Query,
                name: "key".into(),
                value: "s3cret".into()
            }
        );
        assert!(!format!("{:?}", Auth::from_credentials(&creds, None)).contains("s3cret"));
    }
}
