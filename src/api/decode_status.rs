//! Statuses for requests that cannot be decoded, as the gRPC status code guide has them.
//!
//! tonic refuses a request message above the receive limit with `OUT_OF_RANGE` and a
//! Protobuf message it cannot decode (a `google.protobuf.Struct` nested past the decoder's
//! recursion limit, say) with `INTERNAL`. Both are the caller's doing: the guide, grpc-go and
//! grpc-java answer `RESOURCE_EXHAUSTED` for a message larger than the configured maximum,
//! and a malformed request is `INVALID_ARGUMENT`. These failures happen inside tonic before
//! any handler runs, so one response layer reclassifies them, naming the limit or the field.

use http::Response;
use tonic::body::Body;
use tonic::{Code, Status};

/// What tonic's decoder says of a message above the receive limit.
const TOO_LARGE: &str = "decoded message length too large";
/// What prost's decode errors start with.
const UNDECODABLE: &str = "failed to decode Protobuf message: ";
/// What prost says when a message nests deeper than it recurses.
const TOO_DEEP: &str = "recursion limit reached";

/// Rewrites the response of a request tonic could not decode; every other response passes
/// unchanged. A plain function (tonic's message carries the limit), so the layer has a type
/// that can be named.
pub fn reclassify(response: Response<Body>) -> Response<Body> {
    match Status::from_header_map(response.headers()).and_then(|status| replacement(&status)) {
        Some(status) => status.into_http(),
        None => response,
    }
}

fn replacement(status: &Status) -> Option<Status> {
    let message = status.message();
    if status.code() == Code::OutOfRange && message.contains(TOO_LARGE) {
        let number_after = |mark: &str| {
            message
                .split_once(mark)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?")
                .to_owned()
        };
        return Some(Status::resource_exhausted(format!(
            "the request has {} bytes, more than server.max_request_bytes ({})",
            number_after("found "),
            number_after("the limit is: "),
        )));
    }
    if status.code() == Code::Internal {
        let detail = message.strip_prefix(UNDECODABLE)?;
        return Some(Status::invalid_argument(undecodable(detail)));
    }
    None
}

/// `"Value.kind: Struct.fields: ModelConfig.parameters: AgentConfig.model: RunRequest.agent:
/// recursion limit reached"` becomes `"agent.model.parameters is nested too deeply …"`:
/// prost lists the (message, field) pairs innermost first; the request's own fields are
/// named as clients spell them, down to the first well-known type.
fn undecodable(detail: &str) -> String {
    let mut segments: Vec<&str> = detail.split(": ").collect();
    let reason = segments.pop().unwrap_or_default();
    let field: Vec<&str> = segments
        .iter()
        .rev()
        .filter_map(|segment| segment.split_once('.'))
        .take_while(|(message, _)| !matches!(*message, "Struct" | "Value" | "ListValue"))
        .map(|(_, field)| field)
        .collect();
    let field = if field.is_empty() {
        "the request".to_owned()
    } else {
        field.join(".")
    };
    if reason == TOO_DEEP {
        format!("{field} is nested too deeply (at most 100 levels of messages)")
    } else {
        format!("{field} cannot be decoded: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_request_is_resource_exhausted_naming_the_limit() {
        let tonic_says = Status::out_of_range(
            "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
        );
        let status = replacement(&tonic_says).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "the request has 5000000 bytes, more than server.max_request_bytes (4194304)"
        );
    }

    #[test]
    fn a_struct_nested_too_deeply_names_the_field() {
        let prost_says = Status::internal(
            "failed to decode Protobuf message: Value.kind: Struct.fields: Value.kind: \
             Struct.fields: ModelConfig.parameters: AgentConfig.model: RunRequest.agent: \
             recursion limit reached",
        );
        let status = replacement(&prost_says).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "agent.model.parameters is nested too deeply (at most 100 levels of messages)"
        );
    }

    #[test]
    fn other_statuses_pass_unchanged() {
        assert!(replacement(&Status::internal("internal error; see the server log")).is_none());
        assert!(replacement(&Status::out_of_range("page 9 of 3")).is_none());
    }
}
