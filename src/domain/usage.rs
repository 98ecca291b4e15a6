//! Token counts and their cost.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Token counts as an LLM reports them for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens the model generated.
    pub completion_tokens: u64,
    /// Their sum, as the provider reported it.
    pub total_tokens: u64,
    /// Counted by us with the model's tokenizer because the provider reported nothing; a
    /// sum is estimated when any of its parts is.
    #[serde(default)]
    pub estimated: bool,
    /// Prompt tokens read from the provider's prompt cache (part of `prompt_tokens`).
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache (part of `prompt_tokens`).
    #[serde(default)]
    pub cache_creation_tokens: u64,
}

impl TokenUsage {
    /// Counts the provider did not report, taken with our tokenizer.
    pub fn estimated(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            estimated: true,
            ..Self::default()
        }
    }

    /// Adds another call's counts to these.
    pub fn add(&mut self, other: TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.estimated |= other.estimated;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_creation_tokens += other.cache_creation_tokens;
    }
}

/// What a model costs, per million tokens, as configured for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pricing {
    /// Price of one million prompt tokens.
    pub input_per_million: Decimal,
    /// Price of one million completion tokens.
    pub output_per_million: Decimal,
    /// Price of one million prompt tokens read from the cache; the input price when unset.
    #[serde(default)]
    pub cache_read_per_million: Option<Decimal>,
    /// Price of one million prompt tokens written to the cache; the input price when unset.
    #[serde(default)]
    pub cache_write_per_million: Option<Decimal>,
    /// ISO currency code of the prices.
    pub currency: String,
}

impl Default for Pricing {
    fn default() -> Self {
        Self {
            input_per_million: Decimal::ZERO,
            output_per_million: Decimal::ZERO,
            cache_read_per_million: None,
            cache_write_per_million: None,
            currency: "USD".to_owned(),
        }
    }
}

/// Decimal places kept in prices, as the reference keeps them.
const PRICE_SCALE: u32 = 7;

impl Pricing {
    /// The usage record for `tokens` at these prices, with `latency` seconds.
    pub fn usage(&self, tokens: TokenUsage, latency: f64) -> Usage {
        let million = Decimal::from(1_000_000u32);
        let cached = tokens.cache_read_tokens + tokens.cache_creation_tokens;
        let fresh = tokens.prompt_tokens.saturating_sub(cached);
        let read_price = self
            .cache_read_per_million
            .unwrap_or(self.input_per_million);
        let write_price = self
            .cache_write_per_million
            .unwrap_or(self.input_per_million);
        let prompt_price = ((Decimal::from(fresh) * self.input_per_million
            + Decimal::from(tokens.cache_read_tokens) * read_price
            + Decimal::from(tokens.cache_creation_tokens) * write_price)
            / million)
            .round_dp(PRICE_SCALE);
        let completion_price = (Decimal::from(tokens.completion_tokens) * self.output_per_million
            / million)
            .round_dp(PRICE_SCALE);
        Usage {
            tokens,
            prompt_price,
            completion_price,
            total_price: prompt_price + completion_price,
            currency: self.currency.clone(),
            latency,
            queue_time: 0.0,
        }
    }
}

/// Tokens, cost and latency of one round or of a whole message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Token counts.
    pub tokens: TokenUsage,
    /// Cost of the prompt tokens.
    pub prompt_price: Decimal,
    /// Cost of the completion tokens.
    pub completion_price: Decimal,
    /// `prompt_price + completion_price`.
    pub total_price: Decimal,
    /// Currency of the prices.
    pub currency: String,
    /// Wall-clock seconds.
    pub latency: f64,
    /// Seconds spent waiting for a free slot of the provider's concurrency limit
    /// (included in `latency`).
    #[serde(default)]
    pub queue_time: f64,
}

impl Default for Usage {
    fn default() -> Self {
        Pricing::default().usage(TokenUsage::default(), 0.0)
    }
}

impl Usage {
    /// Adds a round's usage; latency is left to the caller, who knows the wall clock.
    pub fn add(&mut self, other: &Usage) {
        self.tokens.add(other.tokens);
        self.queue_time += other.queue_time;
        self.prompt_price += other.prompt_price;
        self.completion_price += other.completion_price;
        self.total_price += other.total_price;
        if self.currency.is_empty() {
            self.currency.clone_from(&other.currency);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_per_million_tokens_rounded_to_seven_places() {
        let pricing = Pricing {
            input_per_million: Decimal::new(25, 1),
            output_per_million: Decimal::from(10),
            currency: "USD".into(),
            ..Pricing::default()
        };
        let tokens = TokenUsage {
            prompt_tokens: 1234,
            completion_tokens: 56,
            total_tokens: 1290,
            estimated: false,
            ..TokenUsage::default()
        };
        let usage = pricing.usage(tokens, 0.5);
        assert_eq!(usage.prompt_price.to_string(), "0.003085");
        assert_eq!(usage.completion_price.to_string(), "0.00056");
        assert_eq!(usage.total_price.to_string(), "0.003645");
    }

    #[test]
    fn adding_usage_sums_tokens_and_prices() {
        let pricing = Pricing {
            input_per_million: Decimal::from(1),
            output_per_million: Decimal::from(2),
            currency: "EUR".into(),
            ..Pricing::default()
        };
        let one = TokenUsage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
            estimated: false,
            ..TokenUsage::default()
        };
        let mut total = pricing.usage(one, 0.1);
        total.add(&pricing.usage(one, 0.2));
        assert_eq!(total.tokens.total_tokens, 30);
        assert_eq!(
            total.total_price,
            pricing
                .usage(
                    TokenUsage {
                        prompt_tokens: 20,
                        completion_tokens: 10,
                        total_tokens: 30,
                        estimated: false,
                        ..TokenUsage::default()
                    },
                    0.0
                )
                .total_price
        );
        assert_eq!(total.currency, "EUR");
        assert!(!total.tokens.estimated);
        total.add(&pricing.usage(TokenUsage::estimated(1, 1), 0.0));
        assert!(total.tokens.estimated);
    }
}
