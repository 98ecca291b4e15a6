//! MCP providers: the tools of an MCP server reached over streamable HTTP with the official
//! Rust SDK (rmcp). The tool list is read when the provider is created or refreshed and
//! stored with it; the session is opened on first use and reopened once if it broke.
//! What a server answers is bounded twice: in time by [`McpSettings::timeout`], and in bytes
//! by the SDK's transport, which reads at most 16 MiB of one answer (a JSON body or one
//! streamed event) and fails the step past it.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation,
    PaginatedRequestParams, ResourceContents,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use std::time::Duration;

use base64::Engine as _;

use super::http_api::truncate_output;
use super::http_body::redacted;
use super::{ErasedTool, FileContent, ToolDescriptor, ToolError, ToolFile, ToolOutput};
use crate::domain::redact::Redactor;
use crate::domain::McpToolDef;

type Session = RunningService<RoleClient, ClientConfig>;

/// The first step with a server: connect and initialize the session.
const CONNECT: &str = "connect";

/// How an MCP connection reaches its server.
#[derive(Clone)]
pub struct McpSettings {
    /// Longest observation, in bytes.
    pub max_output_bytes: usize,
    /// Largest file (image, audio, blob) a call may return, in bytes.
    pub max_file_bytes: usize,
    /// Longest any step may take: connect and initialize, list, call.
    pub timeout: Duration,
    /// The HTTP client (with the outbound policy).
    pub http: reqwest::Client,
}

/// A lazily opened session with one MCP server, shared by the provider's tools.
pub struct McpConnection {
    url: String,
    bearer: Option<String>,
    /// Masks the bearer token in what the server says back.
    redactor: Redactor,
    settings: McpSettings,
    /// A tokio mutex: opening a session awaits, and callers must not open two at once.
    session: Mutex<Option<Arc<Session>>>,
}

impl McpConnection {
    /// A connection to the server at `url`, with an optional bearer token.
    pub fn new(url: &str, bearer: Option<String>, settings: McpSettings) -> Self {
        Self {
            url: url.to_owned(),
            redactor: Redactor::new(bearer.iter()),
            bearer,
            settings,
            session: Mutex::new(None),
        }
    }

    /// `step` within the timeout; a server that never answers is a failure, not a hang.
    async fn bounded<T, E: std::fmt::Display>(
        &self,
        what: &str,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, ToolError> {
        let server = redacted(&self.url);
        match tokio::time::timeout(self.settings.timeout, step).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                // The detail (transport internals, type names) goes to the log; the text
                // shown to the model and to clients says what happened in a few words.
                let detail = err.to_string();
                let detail = self.redactor.redact(&detail);
                tracing::warn!(%server, error = %detail, "MCP {what} failed");
                Err(ToolError::Failed(explain(&server, what, &detail)))
            }
            Err(_) => Err(ToolError::Failed(format!(
                "the MCP server at {server} did not {what} within {}s",
                self.settings.timeout.as_secs_f64()
            ))),
        }
    }

    async fn open(&self) -> Result<Arc<Session>, ToolError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref() {
            return Ok(Arc::clone(session));
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(token) = &self.bearer {
            config = config.auth_header(token.clone());
        }
        let transport =
            StreamableHttpClientTransport::with_client(self.settings.http.clone(), config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agent-runner", env!("CARGO_PKG_VERSION")),
        );
        let session = self.bounded(CONNECT, info.serve(transport)).await?;
        let session = Arc::new(session);
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }

    async fn forget(&self) {
        self.session.lock().await.take();
    }

    /// The server's tools, with their input schemas, read page by page up to the bounds of
    /// [`read_tool_pages`]: a server that pages forever fails the listing at once.
    pub async fn list_tools(&self) -> Result<Vec<McpToolDef>, ToolError> {
        let session = self.open().await?;
        let listed = match self
            .bounded("list its tools", read_tool_pages(&session))
            .await
        {
            Ok(listed) => listed,
            Err(err) => {
                self.forget().await;
                return Err(err);
            }
        };
        listed.map_err(|bound| {
            ToolError::Failed(format!("the MCP server at {} {bound}", redacted(&self.url)))
        })
    }

    /// Calls a tool; a broken session is reopened once.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, ToolError> {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let session = self.open().await?;
        let result = match self
            .bounded("answer the call", session.call_tool(params.clone()))
            .await
        {
            Ok(result) => result,
            Err(_) => {
                self.forget().await;
                let session = self.open().await?;
                self.bounded("answer the call", session.call_tool(params))
                    .await?
            }
        };
        let (mut text, files) = render(name, &result.content, self.settings.max_file_bytes);
        if text.is_empty() {
            if let Some(structured) = &result.structured_content {
                text = structured.to_string();
            }
        }
        let text = truncate_output(text, self.settings.max_output_bytes);
        if result.is_error == Some(true) {
            Err(ToolError::Failed(text))
        } else {
            Ok(ToolOutput {
                text,
                files,
                resources: Vec::new(),
            })
        }
    }
}

/// Most pages of a tool list followed.
const MAX_LIST_PAGES: usize = 100;
/// Most tools one server may list.
const MAX_LISTED_TOOLS: usize = 1_000;
/// Most bytes of tool definitions (names, descriptions, schemas) one server may list.
const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// Reads the tool list page by page, stopping with what was passed (the inner error) at
/// [`MAX_LIST_PAGES`], [`MAX_LISTED_TOOLS`] or [`MAX_LISTED_BYTES`], or at a cursor that
/// comes back, so memory stays bounded whatever the server sends.
async fn read_tool_pages(
    session: &Session,
) -> Result<Result<Vec<McpToolDef>, String>, rmcp::ServiceError> {
    let mut tools = Vec::new();
    let mut bytes = 0usize;
    let mut cursors = std::collections::HashSet::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let page = session
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await?;
        for tool in page.tools {
            let def = McpToolDef {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
                idempotent: tool.annotations.as_ref().is_some_and(|hints| {
                    hints.read_only_hint == Some(true) || hints.idempotent_hint == Some(true)
                }),
            };
            bytes = bytes.saturating_add(
                def.name.len() + def.description.len() + def.input_schema.to_string().len(),
            );
            tools.push(def);
            if tools.len() > MAX_LISTED_TOOLS {
                return Ok(Err(format!(
                    "lists more than {MAX_LISTED_TOOLS} tools, more than a provider may hold"
                )));
            }
            if bytes > MAX_LISTED_BYTES {
                return Ok(Err(format!(
                    "lists more than {} MiB of tool definitions, more than a provider may hold",
                    MAX_LISTED_BYTES >> 20
                )));
            }
        }
        match page.next_cursor {
            None => return Ok(Ok(tools)),
            Some(next) if !cursors.insert(fingerprint(&next)) => {
                return Ok(Err(format!(
                    "lists its tools in a loop (the page cursor {:?} came back)",
                    truncated(&next, 64)
                )));
            }
            Some(next) => {
                bytes = bytes.saturating_add(next.len());
                cursor = Some(next);
            }
        }
    }
    Ok(Err(format!(
        "lists its tools over more than {MAX_LIST_PAGES} pages, more than are read"
    )))
}

/// A short stand-in for a cursor the server sent, which may be long.
fn fingerprint(cursor: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    cursor.hash(&mut hasher);
    hasher.finish()
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A failed step in a few words: a refusal of credentials, the server's own error message
/// (a JSON-RPC error), or what could not be done.
fn explain(server: &str, what: &str, detail: &str) -> String {
    let lower = detail.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|word| lower.contains(word));
    if says(&["unauthorized", "auth required", "authorization required"]) {
        return format!("the MCP server at {server} refused: authentication required (check the bearer_token credential)");
    }
    if says(&["forbidden", "insufficient scope"]) {
        return format!("the MCP server at {server} refused: access denied");
    }
    if let Some(error) = detail.strip_prefix("Mcp error: ") {
        // `<code>: <message>`: the message is the server's own words.
        let message = error.split_once(": ").map_or(error, |(_, message)| message);
        return format!("the MCP server at {server} refused: {message}");
    }
    if what == CONNECT {
        format!("cannot reach the MCP server at {server}")
    } else {
        format!("the MCP server at {server} failed to {what}")
    }
}

/// Content blocks as observation text, and as files what the model cannot read (images,
/// audio, binary resources): those go to the user, and the text says so.
#[allow(clippy::wildcard_enum_match_arm)]
fn render(tool: &str, content: &[ContentBlock], max_file_bytes: usize) -> (String, Vec<ToolFile>) {
    let mut files = Vec::new();
    let mut file = |kind: &str, mime_type: &str, data: &str| {
        if decoded_len(data) > max_file_bytes {
            return format!(
                "[{kind}: {mime_type}, larger than {max_file_bytes} bytes (runner.tool_file_limit_bytes), not kept]"
            );
        }
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
            return format!("[{kind}: {mime_type}, not valid base64]");
        };
        let extension = super::extension_for(mime_type);
        let name = format!("{tool}-{}.{extension}", files.len() + 1);
        let text = format!("[{kind}: {mime_type}, sent to the user as {name}]");
        files.push(ToolFile {
            name,
            mime_type: mime_type.to_owned(),
            content: FileContent::Bytes(bytes),
        });
        text
    };
    let text = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => file("image", &image.mime_type, &image.data),
            ContentBlock::Audio(audio) => file("audio", &audio.mime_type, &audio.data),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents {
                    mime_type, blob, ..
                } => file(
                    "file",
                    mime_type.as_deref().unwrap_or("application/octet-stream"),
                    blob,
                ),
                _ => "[resource]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource: {}]", link.uri),
            // The enum is non-exhaustive: kinds added later are named, not dropped.
            _ => "[unsupported content]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    (text, files)
}

/// The bytes base64 `data` decodes to (4 characters for 3 bytes, less the padding), known
/// before decoding it.
fn decoded_len(data: &str) -> usize {
    let data = data.trim();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// One tool of an MCP server.
pub struct McpTool {
    descriptor: ToolDescriptor,
    connection: Arc<McpConnection>,
}

impl McpTool {
    /// The tool `def` of provider `provider` under the valid name `name`, called through
    /// `connection` under the server's own name.
    pub fn new(
        provider: &str,
        def: &McpToolDef,
        name: String,
        connection: Arc<McpConnection>,
    ) -> Self {
        Self {
            descriptor: ToolDescriptor {
                provider: provider.to_owned(),
                original_name: (name != def.name).then(|| def.name.clone()),
                name,
                description: def.description.clone(),
                parameters: def.input_schema.clone(),
                idempotent: def.idempotent,
                ..ToolDescriptor::default()
            },
            connection,
        }
    }

    /// The name the server knows the tool by.
    fn server_name(&self) -> &str {
        self.descriptor
            .original_name
            .as_deref()
            .unwrap_or(&self.descriptor.name)
    }
}

#[async_trait::async_trait]
impl ErasedTool for McpTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        self.connection.call(self.server_name(), arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_become_files_within_the_file_limit() {
        let image = ContentBlock::image("aGVsbG8=", "image/png");
        let (text, files) = render("chart", &[ContentBlock::text("Drawn."), image.clone()], 5);
        assert_eq!(
            text,
            "Drawn.\n[image: image/png, sent to the user as chart-1.png]"
        );
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].content, FileContent::Bytes(b"hello".to_vec()));
        let (text, files) = render("chart", &[image], 4);
        assert_eq!(
            text,
            "[image: image/png, larger than 4 bytes (runner.tool_file_limit_bytes), not kept]"
        );
        assert!(files.is_empty());
    }

    #[test]
    fn failures_are_explained_in_a_few_words_without_internals() {
        let server = "http://mcp.example";
        assert_eq!(
            explain(server, "call a tool", "Mcp error: -32603: database offline"),
            "the MCP server at http://mcp.example refused: database offline"
        );
        assert_eq!(
            explain(
                server,
                CONNECT,
                "Transport [rmcp::transport::worker::WorkerTransport] error: Client error: \
                 error sending request for url (http://mcp.example/mcp)"
            ),
            "cannot reach the MCP server at http://mcp.example"
        );
        assert_eq!(
            explain(server, "list tools", "Transport error: HTTP 403 Forbidden"),
            "the MCP server at http://mcp.example refused: access denied"
        );
        assert_eq!(
            explain(server, "list tools", "unexpected end of stream"),
            "the MCP server at http://mcp.example failed to list tools"
        );
    }
}
