//! Deterministic tools: sleeping, meeting, failing, drawing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::Barrier;

use crate::tools::{
    ErasedTool, FileContent, Provider, ProviderKind, RegistryError, ToolDescriptor, ToolError,
    ToolFile, ToolOutput,
};

/// Name of the provider that [`testing_provider`] builds.
pub const TESTING_PROVIDER: &str = "testing";

/// Sleeps for `ms` milliseconds, then answers `slept {ms}ms`.
pub struct SleepTool {
    descriptor: ToolDescriptor,
}

/// Waits until `parties` calls are waiting at once, then answers `met`: run one at a time,
/// the calls would never meet, so it proves that calls of a round run concurrently.
pub struct RendezvousTool {
    descriptor: ToolDescriptor,
    barrier: Barrier,
}

/// Always fails with the given message.
pub struct FailingTool {
    descriptor: ToolDescriptor,
}

fn descriptor(name: &str, description: &str, parameters: Value) -> ToolDescriptor {
    ToolDescriptor {
        provider: TESTING_PROVIDER.to_owned(),
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
        ..ToolDescriptor::default()
    }
}

#[async_trait::async_trait]
impl ErasedTool for SleepTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let ms = arguments.get("ms").and_then(Value::as_u64).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(format!("slept {ms}ms").into())
    }
}

#[async_trait::async_trait]
impl ErasedTool for RendezvousTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, _arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        self.barrier.wait().await;
        Ok("met".to_owned().into())
    }
}

#[async_trait::async_trait]
impl ErasedTool for FailingTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let message = arguments
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("boom");
        Err(ToolError::Failed(message.to_owned()))
    }
}

/// Returns a small PNG-like file and says so.
pub struct ChartTool {
    descriptor: ToolDescriptor,
}

/// The bytes [`ChartTool`] returns.
pub const CHART_BYTES: &[u8] = b"\x89PNG\r\n\x1a\nchart";

#[async_trait::async_trait]
impl ErasedTool for ChartTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, _arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            text: "chart.png has been sent to the user".to_owned(),
            files: vec![ToolFile {
                name: "chart.png".to_owned(),
                mime_type: "image/png".to_owned(),
                content: FileContent::Bytes(CHART_BYTES.to_vec()),
            }],
            resources: Vec::new(),
        })
    }
}

/// A provider named `testing` with `sleep`, `rendezvous` (two parties), `fail` and `chart`.
pub fn testing_provider() -> Result<Provider, RegistryError> {
    let tools: Vec<Arc<dyn ErasedTool>> = vec![
        Arc::new(SleepTool {
            descriptor: descriptor(
                "sleep",
                "Sleeps for ms milliseconds",
                json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}),
            ),
        }),
        Arc::new(RendezvousTool {
            descriptor: descriptor(
                "rendezvous",
                "Returns once two calls wait together",
                json!({"type": "object", "properties": {}}),
            ),
            barrier: Barrier::new(2),
        }),
        Arc::new(ChartTool {
            descriptor: descriptor(
                "chart",
                "Draws a chart",
                json!({"type": "object", "properties": {}}),
            ),
        }),
        Arc::new(FailingTool {
            descriptor: descriptor(
                "fail",
                "Always fails",
                json!({"type": "object", "properties": {"message": {"type": "string"}}}),
            ),
        }),
    ];
    Provider::new(
        TESTING_PROVIDER,
        ProviderKind::Builtin,
        "Deterministic tools for tests",
        tools,
    )
}
