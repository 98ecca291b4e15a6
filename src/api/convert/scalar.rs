//! Scalars every conversion shares: timestamps and ids.

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
        return Err(crate::api::status::invalid(field, "is required"));
    }
    value
        .parse()
        .map_err(|_| crate::api::status::invalid(field, &format!("is not a valid id: {value:?}")))
}
