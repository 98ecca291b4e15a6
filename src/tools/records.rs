//! Retrieved passages as evidence: the `records` shape of the External Knowledge API
//! (`{"records": [{"content", "score", "title", "metadata"}]}`), read from knowledge
//! answers and from any tool answer of that shape, so an answer can cite its sources.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::domain::RetrieverResource;

/// The most passages one call contributes.
const MAX_RECORDS: usize = 100;

/// A retrieval answer.
#[derive(Debug, Deserialize)]
pub struct Retrieval {
    /// The passages, best first.
    #[serde(default)]
    pub records: Vec<Record>,
}

/// One passage.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Record {
    /// Its text.
    #[serde(default)]
    pub content: String,
    /// How well it matched.
    #[serde(default)]
    pub score: Option<f64>,
    /// Its title.
    #[serde(default)]
    pub title: Option<String>,
    /// Where it comes from, as the knowledge base describes it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

impl Record {
    /// The passage as evidence; the run fills in its position, provider and call.
    pub fn resource(&self) -> RetrieverResource {
        let source = self
            .metadata
            .as_ref()
            .and_then(|metadata| {
                ["source", "path", "document_name", "url"]
                    .iter()
                    .find_map(|key| metadata.get(*key).and_then(Value::as_str))
            })
            .unwrap_or_default();
        RetrieverResource {
            content: self.content.trim().to_owned(),
            title: self.title.clone().unwrap_or_default(),
            source: source.to_owned(),
            score: self.score,
            ..RetrieverResource::default()
        }
    }
}

/// The passages of a tool answer shaped as a retrieval (an object with a `records` list
/// whose entries have `content`); none for any other answer.
pub fn resources_in(text: &str) -> Vec<RetrieverResource> {
    let text = text.trim_start();
    if !text.starts_with('{') || !text.contains("\"records\"") {
        return Vec::new();
    }
    let Ok(retrieval) = serde_json::from_str::<Retrieval>(text) else {
        return Vec::new();
    };
    retrieval
        .records
        .iter()
        .filter(|record| !record.content.trim().is_empty())
        .take(MAX_RECORDS)
        .map(Record::resource)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_of_records_gives_its_passages_and_anything_else_none() {
        let text = r#"{"records": [
            {"content": "Paris is the capital.", "score": 0.9, "title": "France",
             "metadata": {"path": "s3://kb/france.md"}},
            {"content": "  "},
            {"content": "Lyon", "metadata": {"url": "https://example.com/lyon"}}
        ]}"#;
        let found = resources_in(text);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].source, "s3://kb/france.md");
        assert_eq!(found[0].score, Some(0.9));
        assert_eq!(found[1].source, "https://example.com/lyon");
        assert!(resources_in(r#"{"items": []}"#).is_empty());
        assert!(resources_in("records: none").is_empty());
        assert!(resources_in(r#"{"records": "no"}"#).is_empty());
    }
}
