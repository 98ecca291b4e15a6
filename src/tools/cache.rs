//! Opt-in result caching for a provider's tools: a successful result is reused for the same
//! tool and arguments until its time to live runs out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{ErasedTool, ToolDescriptor, ToolError, ToolOutput};

/// Entries kept per tool; expired ones go first, then the oldest.
const MAX_ENTRIES: usize = 1024;

/// A tool whose successful results are cached.
pub struct CachedTool {
    inner: std::sync::Arc<dyn ErasedTool>,
    ttl: Duration,
    /// Results by canonical arguments. A `std` mutex: held for a map lookup or insert, never
    /// across the tool call.
    entries: Mutex<HashMap<String, (Instant, ToolOutput)>>,
}

impl CachedTool {
    /// Caches `inner`'s results for `ttl`.
    pub fn new(inner: std::sync::Arc<dyn ErasedTool>, ttl: Duration) -> Self {
        Self {
            inner,
            ttl,
            entries: Mutex::default(),
        }
    }

    fn lookup(&self, key: &str) -> Option<ToolOutput> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(stored, _)| stored.elapsed() < self.ttl)
            .map(|(_, output)| output.clone())
    }

    fn remember(&self, key: String, output: &ToolOutput) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (stored, _)| stored.elapsed() < self.ttl);
        }
        if entries.len() >= MAX_ENTRIES {
            if let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, (stored, _))| *stored)
                .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (Instant::now(), output.clone()));
    }
}

#[async_trait::async_trait]
impl ErasedTool for CachedTool {
    fn descriptor(&self) -> &ToolDescriptor {
        self.inner.descriptor()
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        // serde_json's map is ordered by key, so equal arguments print equally.
        let key = Value::Object(arguments.clone()).to_string();
        if let Some(output) = self.lookup(&key) {
            return Ok(output);
        }
        let output = self.inner.call(arguments).await?;
        self.remember(key, &output);
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    struct Counter {
        descriptor: ToolDescriptor,
        calls: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ErasedTool for Counter {
        fn descriptor(&self) -> &ToolDescriptor {
            &self.descriptor
        }
        async fn call(&self, _: Map<String, Value>) -> Result<ToolOutput, ToolError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(ToolOutput {
                text: n.to_string(),
                ..ToolOutput::default()
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn results_are_reused_for_equal_arguments_until_they_expire() {
        let counter = Arc::new(Counter {
            descriptor: ToolDescriptor {
                provider: "p".into(),
                name: "t".into(),
                description: String::new(),
                parameters: json!({}),
                ..ToolDescriptor::default()
            },
            calls: AtomicUsize::new(0),
        });
        let cached = CachedTool::new(counter.clone(), Duration::from_secs(60));
        let text = |v: Value| {
            let call = cached.call(v.as_object().cloned().unwrap());
            async move { call.await.unwrap().text }
        };
        assert_eq!(text(json!({"a": 1, "b": 2})).await, "1");
        assert_eq!(text(json!({"b": 2, "a": 1})).await, "1");
        assert_eq!(text(json!({"a": 2})).await, "2");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(text(json!({"a": 1, "b": 2})).await, "3");
    }
}
