//! Conversions between protobuf messages and domain types. Requests are destructured
//! field by field, so a new proto field is a compile error here until it is handled.

pub mod agent;
pub mod budget;
mod event;
mod exported;
pub mod json;
pub mod provider;
mod record;
pub mod reference;
mod run;
pub mod run_listing;
mod scalar;

pub use exported::exported_run;
pub use json::{json_to_struct, struct_to_json};
pub use record::message_status;
pub use run::run_spec;
pub use scalar::{parse_id, timestamp};
