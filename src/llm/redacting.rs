//! A provider's client that masks the provider's key in every failure it reports, since a
//! gateway's error answer may quote the key it received.

use std::sync::Arc;

use futures::StreamExt;

use super::{ChatModel, ChatRequest, ChatStream, LlmError};
use crate::domain::redact::Redactor;

/// `inner` with its failures' texts passed through `redactor`.
pub struct Redacting {
    inner: Arc<dyn ChatModel>,
    redactor: Redactor,
}

impl Redacting {
    /// Wraps `inner`, unless there is nothing to mask.
    pub fn wrap(inner: Arc<dyn ChatModel>, redactor: Redactor) -> Arc<dyn ChatModel> {
        if redactor.is_empty() {
            return inner;
        }
        Arc::new(Self { inner, redactor })
    }
}

#[async_trait::async_trait]
impl ChatModel for Redacting {
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        match self.inner.stream(request).await {
            Ok(stream) => {
                let redactor = self.redactor.clone();
                Ok(Box::pin(stream.map(move |item| {
                    item.map_err(|err| err.redacted(&redactor))
                })))
            }
            Err(err) => Err(err.redacted(&self.redactor)),
        }
    }
}
