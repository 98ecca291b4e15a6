//! Knowledge providers: one tool that searches a knowledge base through the External
//! Knowledge API (`POST {endpoint}/retrieval`), rendering its records as numbered passages.

use serde_json::{json, Map, Value};

use super::http_api::truncate_output;
use super::records::{Record, Retrieval};
use super::{http_body, ErasedTool, ToolDescriptor, ToolError, ToolOutput};

/// Where and how to search.
#[derive(Debug, Clone)]
pub struct KnowledgeSettings {
    /// Base URL of the API.
    pub endpoint: String,
    /// The knowledge base.
    pub knowledge_id: String,
    /// Passages to retrieve.
    pub top_k: u32,
    /// Lowest score kept.
    pub score_threshold: f64,
    /// Bearer key, if the API needs one.
    pub api_key: Option<String>,
    /// Longest observation, in bytes.
    pub max_output_bytes: usize,
    /// Largest answer read (the records JSON), in bytes.
    pub max_answer_bytes: usize,
}

/// The search tool of one knowledge base.
pub struct KnowledgeTool {
    descriptor: ToolDescriptor,
    settings: KnowledgeSettings,
    http: reqwest::Client,
}

impl KnowledgeTool {
    /// The tool of provider `provider`, named after it.
    pub fn new(
        provider: &str,
        description: &str,
        settings: KnowledgeSettings,
        http: reqwest::Client,
    ) -> Self {
        let description = if description.trim().is_empty() {
            format!("Search the {provider} knowledge base for passages relevant to a query.")
        } else {
            description.replace('\n', " ")
        };
        let descriptor = ToolDescriptor {
            provider: provider.to_owned(),
            name: provider.to_owned(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "minLength": 1, "description": "What to search the knowledge base for"}},
                "required": ["query"]
            }),
            idempotent: true,
            ..ToolDescriptor::default()
        };
        Self {
            descriptor,
            settings,
            http,
        }
    }

    fn body(&self, query: &str) -> Value {
        json!({
            "knowledge_id": self.settings.knowledge_id,
            "query": query,
            "retrieval_setting": {"top_k": self.settings.top_k, "score_threshold": self.settings.score_threshold},
        })
    }
}

/// Records as numbered passages with their titles and scores.
fn render(records: &[Record], query: &str) -> String {
    if records.is_empty() {
        return format!("No passages in the knowledge base match {query:?}.");
    }
    passages(records).join("\n\n")
}

fn passages(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .enumerate()
        .map(|(i, record)| {
            let title = record
                .title
                .as_deref()
                .filter(|t| !t.is_empty())
                .unwrap_or("untitled");
            let score = record
                .score
                .map(|s| format!(" (score {s:.2})"))
                .unwrap_or_default();
            format!("{}. {title}{score}\n{}", i + 1, record.content.trim())
        })
        .collect()
}

/// How many passages begin within the first `limit` bytes of the rendering: the ones the
/// model sees, and so the ones an answer may cite.
fn seen(records: &[Record], limit: usize) -> usize {
    let mut start = 0;
    passages(records)
        .iter()
        .take_while(|passage| {
            let visible = start < limit;
            start += passage.len() + 2;
            visible
        })
        .count()
}

#[async_trait::async_trait]
impl ErasedTool for KnowledgeTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let url = format!("{}/retrieval", self.settings.endpoint.trim_end_matches('/'));
        let mut request = self.http.post(url).json(&self.body(query));
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        let response = crate::telemetry::traces::traced(request)
            .send()
            .await
            .map_err(|err| http_body::transport("knowledge request failed", err))?;
        let status = response.status();
        let limit = self.settings.max_answer_bytes;
        let body = http_body::read_limited(response, limit).await?;
        if body.cut && status.is_success() {
            return Err(ToolError::Failed(format!(
                "the knowledge answer is larger than {limit} bytes (runner.tool_file_limit_bytes)"
            )));
        }
        let text = String::from_utf8_lossy(&body.bytes).into_owned();
        if !status.is_success() {
            return Err(ToolError::Failed(format!(
                "HTTP {status}: {}",
                truncate_output(text, 500)
            )));
        }
        let retrieval: Retrieval = serde_json::from_str(&text).map_err(|err| {
            ToolError::Failed(format!("the knowledge answer is not a records list: {err}"))
        })?;
        let limit = self.settings.max_output_bytes;
        let resources = retrieval.records[..seen(&retrieval.records, limit)]
            .iter()
            .map(Record::resource)
            .collect();
        Ok(ToolOutput {
            text: truncate_output(render(&retrieval.records, query), limit),
            files: Vec::new(),
            resources,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_render_as_numbered_passages() {
        let records = vec![
            Record {
                content: " Paris is the capital. ".into(),
                score: Some(0.91),
                title: Some("France".into()),
                metadata: None,
            },
            Record {
                content: "Lyon".into(),
                ..Record::default()
            },
        ];
        assert_eq!(seen(&records, 10_000), 2);
        assert_eq!(
            seen(&records, 10),
            1,
            "the second passage starts past the cut"
        );
        assert_eq!(
            render(&records, "q"),
            "1. France (score 0.91)\nParis is the capital.\n\n2. untitled\nLyon"
        );
        assert_eq!(
            render(&[], "capital"),
            "No passages in the knowledge base match \"capital\"."
        );
    }
}
