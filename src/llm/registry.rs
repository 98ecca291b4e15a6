//! LLM providers from the server configuration, and what each model can do and costs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::anthropic::AnthropicClient;
use super::openai::OpenAiClient;
use super::{ChatModel, Tokenizer};
use crate::domain::redact::Redactor;
use crate::domain::{ErrorKind, Pricing};

pub use crate::domain::Secret;

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
    fn default_key_env(self) -> Option<&'static str> {
        match self {
            Self::Openai => None,
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
        }
    }
}

/// The `gen_ai.provider.name` of providers plugged in by code rather than configuration.
pub const CUSTOM_API: &str = "custom";

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
    pub tokenizer: Option<Tokenizer>,
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
    2
}
fn default_retry_base_ms() -> u64 {
    500
}
fn default_retry_max_delay_ms() -> u64 {
    10_000
}
fn default_queue_timeout() -> u64 {
    60
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

impl ProviderConfig {
    /// The provider used when no configuration file is given, configured as the OpenAI SDKs
    /// are: `OPENAI_BASE_URL` (default `https://api.openai.com/v1`) and `OPENAI_API_KEY`.
    pub fn openai_from_env() -> Self {
        Self {
            kind: ProviderApi::Openai,
            base_url: std::env::var("OPENAI_BASE_URL")
                .unwrap_or_else(|_| "https://api.openai.com/v1".to_owned()),
            api_key: None,
            api_key_env: Some("OPENAI_API_KEY".to_owned()),
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

    /// The provider configured as Anthropic's SDKs are, when `ANTHROPIC_API_KEY` is set:
    /// `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`) and that key.
    pub fn anthropic_from_env() -> Option<Self> {
        std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .filter(|key| !key.trim().is_empty())?;
        Some(Self {
            kind: ProviderApi::Anthropic,
            base_url: std::env::var("ANTHROPIC_BASE_URL").unwrap_or_default(),
            api_key_env: Some("ANTHROPIC_API_KEY".to_owned()),
            ..Self::openai_from_env()
        })
    }

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

    /// How calls to this provider are retried and limited.
    pub fn call_policy(&self) -> CallPolicy {
        CallPolicy {
            retry: RetryPolicy {
                max_retries: self.max_retries,
                base: Duration::from_millis(self.retry_base_ms),
                max_delay: Duration::from_millis(self.retry_max_delay_ms),
            },
            slots: (self.max_concurrent_requests > 0)
                .then(|| Arc::new(Semaphore::new(self.max_concurrent_requests as usize))),
            queue_timeout: Duration::from_secs(self.queue_timeout_secs),
        }
    }

    /// The API key, inline or from the named environment variable.
    pub fn resolved_api_key(&self) -> Option<Secret> {
        self.api_key.clone().or_else(|| {
            self.api_key_env
                .as_deref()
                .or(self.kind.default_key_env())
                .and_then(|var| std::env::var(var).ok())
                .filter(|key| !key.is_empty())
                .map(Secret::new)
        })
    }
}

/// What the runner needs to know about a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Model name as the provider knows it.
    pub name: String,
    /// Context window in tokens, when known.
    pub context_window: Option<u32>,
    /// Supported features.
    pub features: Vec<Feature>,
    /// Prices.
    pub pricing: Pricing,
    /// Vocabulary for counting its tokens.
    pub tokenizer: Tokenizer,
}

impl ModelInfo {
    /// Whether the model has `feature`.
    pub fn has(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }
}

impl From<&ModelEntry> for ModelInfo {
    fn from(entry: &ModelEntry) -> Self {
        Self {
            name: entry.name.clone(),
            context_window: entry.context_window,
            features: entry.features.clone(),
            pricing: Pricing {
                input_per_million: entry.input_price,
                output_per_million: entry.output_price,
                cache_read_per_million: entry.cache_read_price,
                cache_write_per_million: entry.cache_write_price,
                currency: entry.currency.clone(),
            },
            tokenizer: Tokenizer::for_model(&entry.name, entry.tokenizer),
        }
    }
}

/// How a failed call to a provider is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The longest wait before the first retry; doubles for each later one.
    pub base: Duration,
    /// The longest wait before any retry.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: default_max_retries(),
            base: Duration::from_millis(default_retry_base_ms()),
            max_delay: Duration::from_millis(default_retry_max_delay_ms()),
        }
    }
}

/// How calls to one provider are retried and how many may be in flight.
#[derive(Debug, Clone)]
pub struct CallPolicy {
    /// Retries of failed calls.
    pub retry: RetryPolicy,
    /// Slots for calls in flight, shared by every run; `None` is unlimited. A tokio
    /// semaphore, because a call holds its slot across awaits until its stream ends.
    pub slots: Option<Arc<Semaphore>>,
    /// How long a call waits for a slot.
    pub queue_timeout: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            slots: None,
            queue_timeout: Duration::from_secs(default_queue_timeout()),
        }
    }
}

/// A model ready to call.
#[derive(Clone)]
pub struct ResolvedModel {
    /// Name of the provider it came from.
    pub provider: String,
    /// The client.
    pub client: Arc<dyn ChatModel>,
    /// What the model can do and costs.
    pub info: ModelInfo,
    /// Its provider's retries and concurrency limit.
    pub policy: CallPolicy,
    /// The API its provider speaks (`openai`), as telemetry names it.
    pub api: &'static str,
    /// Whether the configuration lists the model (so its name may be a metric label).
    pub listed: bool,
}

impl ResolvedModel {
    /// The model's name as a metric label: a listed model's own, `other` for any name a
    /// caller made up, so callers cannot grow the label set.
    pub fn label(&self) -> &str {
        if self.listed {
            &self.info.name
        } else {
            "other"
        }
    }
}

/// A provider or model that the configuration does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelLookupError {
    /// No provider of that name.
    #[error("unknown provider {name:?} (configured: {known})")]
    UnknownProvider {
        /// Name asked for.
        name: String,
        /// Configured names, comma-separated.
        known: String,
    },
    /// The provider lists its models strictly and this one is not among them.
    #[error("unknown model {model:?} for provider {provider:?}")]
    UnknownModel {
        /// Provider name.
        provider: String,
        /// Model asked for.
        model: String,
    },
}

impl ModelLookupError {
    /// Lookups fail on the caller's input.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

struct Provider {
    client: Arc<dyn ChatModel>,
    models: HashMap<String, ModelInfo>,
    strict: bool,
    policy: CallPolicy,
    api: &'static str,
}

/// Every configured provider, by name.
#[derive(Default)]
pub struct ModelRegistry {
    providers: BTreeMap<String, Provider>,
}

impl ModelRegistry {
    /// Builds a client for every configured provider.
    pub fn from_config(
        providers: &BTreeMap<String, ProviderConfig>,
    ) -> Result<Self, super::LlmError> {
        let mut registry = Self::default();
        for (name, config) in providers {
            let client: Arc<dyn ChatModel> = match config.kind {
                ProviderApi::Openai => Arc::new(OpenAiClient::new(config)?),
                ProviderApi::Anthropic => Arc::new(AnthropicClient::new(config)?),
            };
            let key = config.resolved_api_key();
            let redactor = Redactor::new(key.as_ref().map(Secret::expose));
            let client = super::redacting::Redacting::wrap(client, redactor);
            registry.insert(name, client, &config.models, config.strict_models);
            registry.set_policy(name, config.call_policy());
            if let Some(provider) = registry.providers.get_mut(name) {
                provider.api = config.kind.as_str();
            }
        }
        Ok(registry)
    }

    /// Sets how calls to provider `name` are retried and limited.
    pub fn set_policy(&mut self, name: &str, policy: CallPolicy) {
        if let Some(provider) = self.providers.get_mut(name) {
            provider.policy = policy;
        }
    }

    /// Adds (or replaces) a provider with the default call policy; also how tests plug in
    /// scripted models.
    pub fn insert(
        &mut self,
        name: &str,
        client: Arc<dyn ChatModel>,
        models: &[ModelEntry],
        strict: bool,
    ) {
        let models = models
            .iter()
            .map(|entry| (entry.name.clone(), ModelInfo::from(entry)))
            .collect();
        self.providers.insert(
            name.to_owned(),
            Provider {
                client,
                models,
                strict,
                policy: CallPolicy::default(),
                api: CUSTOM_API,
            },
        );
    }

    /// The model `model` of provider `provider`; unlisted models get defaults unless the
    /// provider is strict.
    pub fn resolve(&self, provider: &str, model: &str) -> Result<ResolvedModel, ModelLookupError> {
        let entry =
            self.providers
                .get(provider)
                .ok_or_else(|| ModelLookupError::UnknownProvider {
                    name: provider.to_owned(),
                    known: self
                        .providers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        let listed = entry.models.contains_key(model);
        let info = match entry.models.get(model) {
            Some(info) => info.clone(),
            None if entry.strict => {
                return Err(ModelLookupError::UnknownModel {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                })
            }
            None => ModelInfo::from(&ModelEntry::unlisted(model)),
        };
        Ok(ResolvedModel {
            provider: provider.to_owned(),
            client: Arc::clone(&entry.client),
            info,
            policy: entry.policy.clone(),
            api: entry.api,
            listed,
        })
    }
}
