//! A run with a cost budget needs a price for every model it may call, in one currency:
//! its model, its fallbacks and every model of the sub-agents below it. Without one the budget could not
//! be held, so such a run is refused before it starts.

use super::error::RunError;
use super::pin;
use super::spec::{ModelSpec, RunSpec};
use crate::domain::{FieldError, Pricing};
use crate::llm::ModelRegistry;
use crate::store::Store;

/// Refuses `spec` when it has a cost budget and a model it may call has no price or a
/// price in another currency than its model's.
pub async fn check_priced(
    store: &Store,
    models: &ModelRegistry,
    spec: &RunSpec,
    limited_by_ceiling: bool,
) -> Result<(), RunError> {
    if spec.agent.budget.cost.is_none() {
        return Ok(());
    }
    let field = match (limited_by_ceiling, spec.pinned.is_some()) {
        (true, _) => "limits.max_run_cost",
        (false, true) => "agent_ref",
        (false, false) => "agent.budget.max_cost",
    };
    let refuse = |reason: String| RunError::from(FieldError::new(field, reason));
    let mut priced: Vec<(String, Pricing)> = Vec::new();
    collect(models, &spec.agent.model, &mut priced)?;
    // The whole tree as it resolves now: a sub-agent's own sub-agents spend from this
    // budget too. (A version an alias moves to later is checked when its child starts.)
    for definition in pin::tree_below(store, &spec.tenant, &spec.agent.sub_agents).await {
        collect(models, &definition?.agent.model, &mut priced)?;
    }
    let currency = priced
        .first()
        .map(|(_, price)| price.currency.clone())
        .unwrap_or_default();
    for (model, price) in &priced {
        if price.input_per_million.is_zero() && price.output_per_million.is_zero() {
            return Err(refuse(format!(
                "sets a cost budget, but model {model} has no price (input_price, \
                 output_price in its provider's [[models]])"
            )));
        }
        if price.currency != currency {
            return Err(refuse(format!(
                "sets a cost budget in {currency}, but model {model} is priced in {}",
                price.currency
            )));
        }
    }
    Ok(())
}

/// The prices of `model` and its fallbacks, each named `provider/model`.
fn collect(
    models: &ModelRegistry,
    model: &ModelSpec,
    priced: &mut Vec<(String, Pricing)>,
) -> Result<(), RunError> {
    let names = std::iter::once((&model.provider, &model.name)).chain(
        model
            .fallbacks
            .iter()
            .map(|fallback| (&fallback.provider, &fallback.name)),
    );
    for (provider, name) in names {
        let resolved = models.resolve(provider, name)?;
        priced.push((format!("{provider}/{name}"), resolved.info.pricing));
    }
    Ok(())
}
