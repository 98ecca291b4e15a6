//! Conversions between protobuf messages and domain types. Requests are destructured
//! field by field, so a new proto field is a compile error here until it is handled.

pub mod agent;
pub mod budget;
mod event;
pub mod json;
pub mod provider;
mod record;
pub mod reference;
mod run;

pub use json::{json_to_struct, struct_to_json};
pub use record::message_status;
pub use run::run_spec;

use prost_types::Timestamp;

/// A protobuf timestamp of a UTC time.
pub fn timestamp(time: chrono::DateTime<chrono::Utc>) -> Timestamp {
    Timestamp {
        seconds: time.timestamp(),
        nanos: i32::try_from(time.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

/// Parses an id field, naming it on failure.
pub fn parse_id<T: std::str::FromStr>(field: &str, value: &str) -> Result<T, tonic::Status> {
    if value.is_empty() {
        return Err(super::status::invalid(field, "is required"));
    }
    value
        .parse()
        .map_err(|_| super::status::invalid(field, &format!("is not a valid id: {value:?}")))
}
