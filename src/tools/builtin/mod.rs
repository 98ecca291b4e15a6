//! Providers that ship with the service: `time` and `maths`.

mod maths;
mod time;

use super::{Provider, ProviderKind, RegistryError, Typed};

pub use maths::EvalExpression;
pub use time::{CurrentTime, TimezoneConversion, Weekday};

/// The built-in providers, always registered.
pub fn providers() -> Result<Vec<Provider>, RegistryError> {
    Ok(vec![
        Provider::new(
            "time",
            ProviderKind::Builtin,
            "Current time, weekdays and time zone conversion",
            vec![
                Typed::erase("time", CurrentTime),
                Typed::erase("time", Weekday),
                Typed::erase("time", TimezoneConversion),
            ],
        )?,
        Provider::new(
            "maths",
            ProviderKind::Builtin,
            "Arithmetic and logic expressions",
            vec![Typed::erase("maths", EvalExpression)],
        )?,
    ])
}
