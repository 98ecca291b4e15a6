//! A registered provider's tools with the provider's credentials masked in what comes back:
//! an API that echoes the key it received must not put it in front of the model, in a
//! stored thought or in a log.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{ErasedTool, ToolDescriptor, ToolError, ToolOutput};
use crate::domain::redact::Redactor;

/// The masks for a provider's `credentials`: every value, and basic credentials in the
/// form their header carries.
pub fn redactor_for(credentials: &BTreeMap<String, String>) -> Redactor {
    let redactor = Redactor::new(credentials.values());
    match (credentials.get("username"), credentials.get("password")) {
        (Some(user), Some(password)) => redactor.with_basic_auth(user, password),
        _ => redactor,
    }
}

/// A tool whose answers and failures are masked.
pub struct RedactingTool {
    inner: Arc<dyn ErasedTool>,
    redactor: Redactor,
}

impl RedactingTool {
    /// Wraps `inner`, unless there is nothing to mask.
    pub fn wrap(inner: Arc<dyn ErasedTool>, redactor: &Redactor) -> Arc<dyn ErasedTool> {
        if redactor.is_empty() {
            return inner;
        }
        Arc::new(Self {
            inner,
            redactor: redactor.clone(),
        })
    }
}

#[async_trait::async_trait]
impl ErasedTool for RedactingTool {
    fn descriptor(&self) -> &ToolDescriptor {
        self.inner.descriptor()
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        match self.inner.call(arguments).await {
            Ok(mut output) => {
                self.redactor.redact_in_place(&mut output.text);
                for resource in &mut output.resources {
                    self.redactor.redact_in_place(&mut resource.content);
                    self.redactor.redact_in_place(&mut resource.title);
                    self.redactor.redact_in_place(&mut resource.source);
                }
                Ok(output)
            }
            Err(ToolError::Failed(mut text)) => {
                self.redactor.redact_in_place(&mut text);
                Err(ToolError::Failed(text))
            }
            Err(ToolError::InvalidArguments(mut text)) => {
                self.redactor.redact_in_place(&mut text);
                Err(ToolError::InvalidArguments(text))
            }
        }
    }
}
