//! An LLM provider's entry in the configuration and its models, as an operator writes them:
//! plain data that the configuration reads and the model clients are built from.

use rust_decimal::Decimal;
use serde::Deserialize;

use super::Secret;

/// A BPE vocabulary, by the name a model's entry gives it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vocabulary {
    /// GPT-4 and GPT-3.5 era models; also the fallback for unknown families.
    #[default]
    Cl100kBase,
    /// GPT-4o, GPT-4.1, GPT-5 and the o-series.
    O200kBase,
}

/// Which wire protocol an LLM provider speaks (the `kind` key of its configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderApi {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, DeepSeek …).
    #[default]
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
}

impl ProviderApi {
    /// The API's name, as `gen_ai.provider.name` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// Where the API is when the configuration does not say.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::Openai => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
        }
    }

    /// The environment variable holding the key when the configuration names none. None
    /// for OpenAI-compatible servers: a local server must not be sent OpenAI's key.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            Self::Openai => None,
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
        }
    }
}

/// What a model supports, as the reference names the features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// Native function calling.
    ToolCall,
    /// Several tool calls in one turn.
    MultiToolCall,
    /// Tool calls arrive as streamed deltas.
    StreamToolCall,
    /// Image input.
    Vision,
    /// Native structured output: the answer held to a JSON Schema (OpenAI's
    /// `response_format: json_schema`).
    StructuredOutput,
}

fn default_features() -> Vec<Feature> {
    vec![
        Feature::ToolCall,
        Feature::MultiToolCall,
        Feature::StreamToolCall,
    ]
}

fn default_currency() -> String {
    "USD".to_owned()
}

/// One model's entry in a provider's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Model name as the provider knows it.
    pub name: String,
    /// Context window in tokens; unknown when absent.
    #[serde(default)]
    pub context_window: Option<u32>,
    /// Supported features; function calling with streamed tool calls when absent.
    #[serde(default = "default_features")]
    pub features: Vec<Feature>,
    /// Price per million prompt tokens.
    #[serde(default)]
    pub input_price: Decimal,
    /// Price per million completion tokens.
    #[serde(default)]
    pub output_price: Decimal,
    /// Currency of the prices.
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Vocabulary for counting tokens when the name does not tell the family.
    #[serde(default)]
    pub tokenizer: Option<Vocabulary>,
    /// The most tokens the model writes in one answer: Anthropic's `max_tokens` when the
    /// request's parameters give none.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Price per million prompt tokens read from the provider's cache; the input price
    /// when absent.
    #[serde(default)]
    pub cache_read_price: Option<Decimal>,
    /// Price per million prompt tokens written to the provider's cache; the input price
    /// when absent.
    #[serde(default)]
    pub cache_write_price: Option<Decimal>,
}

impl ModelEntry {
    /// The entry an unlisted model gets: function calling, no known window, free.
    pub fn unlisted(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            context_window: None,
            features: default_features(),
            input_price: Decimal::ZERO,
            output_price: Decimal::ZERO,
            currency: default_currency(),
            tokenizer: None,
            max_output_tokens: None,
            cache_read_price: None,
            cache_write_price: None,
        }
    }
}

/// Retries of a failed call when a provider's entry does not say.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// The first retry's longest wait, in milliseconds, when a provider's entry does not say.
pub const DEFAULT_RETRY_BASE_MS: u64 = 500;
/// The longest wait before any retry, in milliseconds, when a provider's entry does not say.
pub const DEFAULT_RETRY_MAX_DELAY_MS: u64 = 10_000;
/// Seconds a call waits for a free slot, when a provider's entry does not say.
pub const DEFAULT_QUEUE_TIMEOUT_SECS: u64 = 60;

fn default_connect_timeout() -> u64 {
    10
}
fn default_first_byte_timeout() -> u64 {
    120
}
fn default_idle_timeout() -> u64 {
    300
}
fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}
fn default_retry_base_ms() -> u64 {
    DEFAULT_RETRY_BASE_MS
}
fn default_retry_max_delay_ms() -> u64 {
    DEFAULT_RETRY_MAX_DELAY_MS
}
fn default_queue_timeout() -> u64 {
    DEFAULT_QUEUE_TIMEOUT_SECS
}

/// One LLM provider from the configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Wire protocol.
    #[serde(default)]
    pub kind: ProviderApi,
    /// API base, e.g. `https://api.openai.com/v1`; the API's own when empty.
    #[serde(default)]
    pub base_url: String,
    /// API key given inline.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Environment variable to read the API key from, when not inline (for `anthropic`,
    /// `ANTHROPIC_API_KEY` unless set).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The `anthropic-version` header of `anthropic` providers.
    #[serde(default)]
    pub anthropic_version: Option<String>,
    /// Seconds to establish a connection.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Seconds from sending a request to the first byte of its answer.
    #[serde(default = "default_first_byte_timeout")]
    pub first_byte_timeout_secs: u64,
    /// Seconds a stream may stay silent between chunks.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: u64,
    /// Reject models that are not listed below instead of giving them defaults.
    #[serde(default)]
    pub strict_models: bool,
    /// Retries of a call that failed before the user saw any of its answer (connection
    /// errors, timeouts before the first byte, 408, 409, 429, 5xx).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// The first retry waits up to this long; each later one up to twice as long.
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// No retry waits longer; a provider asking for a longer wait is not retried.
    #[serde(default = "default_retry_max_delay_ms")]
    pub retry_max_delay_ms: u64,
    /// Calls in flight to this provider at most; 0 is unlimited.
    #[serde(default)]
    pub max_concurrent_requests: u32,
    /// Seconds a call waits for a free slot before it counts as a retryable failure.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout_secs: u64,
    /// Known models with their features and prices.
    #[serde(default)]
    pub models: Vec<ModelEntry>,
}

impl Default for ProviderConfig {
    /// An OpenAI-compatible provider with every limit at its default and no models listed.
    fn default() -> Self {
        Self {
            kind: ProviderApi::Openai,
            base_url: String::new(),
            api_key: None,
            api_key_env: None,
            anthropic_version: None,
            connect_timeout_secs: default_connect_timeout(),
            first_byte_timeout_secs: default_first_byte_timeout(),
            idle_timeout_secs: default_idle_timeout(),
            strict_models: false,
            max_retries: default_max_retries(),
            retry_base_ms: default_retry_base_ms(),
            retry_max_delay_ms: default_retry_max_delay_ms(),
            max_concurrent_requests: 0,
            queue_timeout_secs: default_queue_timeout(),
            models: Vec::new(),
        }
    }
}

impl ProviderConfig {
    /// The API base without a trailing slash: the configured one, else the API's own.
    pub fn api_base(&self) -> String {
        let base = self.base_url.trim();
        let base = if base.is_empty() {
            self.kind.default_base_url()
        } else {
            base
        };
        base.trim_end_matches('/').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider built in code (the ones made from the environment) has the limits an
    /// entry written with nothing but its name gets.
    #[test]
    fn the_default_provider_is_an_empty_entry() {
        let written: ProviderConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(
            format!("{written:?}"),
            format!("{:?}", ProviderConfig::default())
        );
    }
}
