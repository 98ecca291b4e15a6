//! LLM providers from the server configuration, and what each model can do and costs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::anthropic::AnthropicClient;
use super::openai::OpenAiClient;
use super::{ChatModel, Tokenizer};
use crate::domain::redact::Redactor;
use crate::domain::{ErrorKind, Pricing};

pub use crate::domain::{Feature, ModelEntry, ProviderApi, ProviderConfig, Secret};

/// The `gen_ai.provider.name` of providers plugged in by code rather than configuration.
pub const CUSTOM_API: &str = "custom";

/// How calls to the provider `config` describes are retried and limited.
pub fn call_policy(config: &ProviderConfig) -> CallPolicy {
    CallPolicy {
        retry: RetryPolicy {
            max_retries: config.max_retries,
            base: Duration::from_millis(config.retry_base_ms),
            max_delay: Duration::from_millis(config.retry_max_delay_ms),
        },
        slots: (config.max_concurrent_requests > 0)
            .then(|| Arc::new(Semaphore::new(config.max_concurrent_requests as usize))),
        queue_timeout: Duration::from_secs(config.queue_timeout_secs),
    }
}

/// The provider's API key, inline or from the environment variable its entry names (or
/// its API's own, for Anthropic).
pub fn api_key(config: &ProviderConfig) -> Option<Secret> {
    config.api_key.clone().or_else(|| {
        config
            .api_key_env
            .as_deref()
            .or(config.kind.default_key_env())
            .and_then(|var| std::env::var(var).ok())
            .filter(|key| !key.is_empty())
            .map(Secret::new)
    })
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
            tokenizer: Tokenizer::for_model(&entry.name, entry.tokenizer.map(Tokenizer::from)),
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
            max_retries: crate::domain::DEFAULT_MAX_RETRIES,
            base: Duration::from_millis(crate::domain::DEFAULT_RETRY_BASE_MS),
            max_delay: Duration::from_millis(crate::domain::DEFAULT_RETRY_MAX_DELAY_MS),
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
            queue_timeout: Duration::from_secs(crate::domain::DEFAULT_QUEUE_TIMEOUT_SECS),
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
            let key = api_key(config);
            let redactor = Redactor::new(key.as_ref().map(Secret::expose));
            let client = super::redacting::Redacting::wrap(client, redactor);
            registry.insert(name, client, &config.models, config.strict_models);
            registry.set_policy(name, call_policy(config));
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
