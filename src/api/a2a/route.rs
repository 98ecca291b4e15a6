//! What an A2A request names beyond its message: the stored agent (the request's `tenant`
//! field, an opaque routing string to A2A, here `AGENT_ID`, `AGENT_ID:ALIAS` or
//! `AGENT_ID@VERSION`), the protocol version and the extensions the client declared (the
//! `a2a-version` and `a2a-extensions` metadata).

use tonic::metadata::MetadataMap;
use tonic::Status;

use super::errors::A2aError;
use crate::api::status::{from_error, invalid};
use crate::domain::agent::{check_slug, LATEST};
use crate::domain::VersionPick;

/// The extension through which approvals and client tools travel: an input-required task
/// names the calls waiting in a data part, and the client answers with decisions or outputs.
pub const TOOL_CALLS_EXTENSION: &str = "urn:agentrunner:a2a:tool-calls:v1";

/// The protocol version spoken.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The stored agent and version a routing string names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The agent.
    pub agent_id: String,
    /// Which of its versions.
    pub pick: VersionPick,
}

/// Reads a routing string; refusals name the field `tenant`.
pub fn route(routing: &str) -> Result<Route, Status> {
    if routing.is_empty() {
        return Err(invalid(
            "tenant",
            "must name the stored agent: AGENT_ID, AGENT_ID:ALIAS or AGENT_ID@VERSION",
        ));
    }
    let (agent_id, pick) = if let Some((id, version)) = routing.split_once('@') {
        let number = version
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid("tenant", "has a version that is not a positive number"))?;
        (id, VersionPick::Number(number))
    } else if let Some((id, alias)) = routing.split_once(':') {
        check_slug("tenant", alias).map_err(from_error)?;
        let pick = match alias {
            LATEST => VersionPick::Latest,
            alias => VersionPick::Alias(alias.to_owned()),
        };
        (id, pick)
    } else {
        (routing, VersionPick::Latest)
    };
    check_slug("tenant", agent_id).map_err(from_error)?;
    Ok(Route {
        agent_id: agent_id.to_owned(),
        pick,
    })
}

/// Refuses a client of another protocol version; no `a2a-version` means 0.3, as the
/// specification says.
pub fn check_version(metadata: &MetadataMap) -> Result<(), Status> {
    let version = metadata
        .get("a2a-version")
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .unwrap_or("0.3");
    let mut numbers = version.split('.');
    let major_minor = (numbers.next(), numbers.next());
    if major_minor == (Some("1"), Some("0")) {
        return Ok(());
    }
    let shown: String = version.chars().take(32).collect();
    Err(A2aError::VersionNotSupported(shown).into())
}

/// Whether the client declared `extension` in `a2a-extensions` (comma-separated, and
/// possibly given more than once).
pub fn declared(metadata: &MetadataMap, extension: &str) -> bool {
    metadata
        .get_all("a2a-extensions")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|uri| uri.trim() == extension)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routing_string_names_an_agent_and_a_version() {
        let pick = |text: &str| route(text).map(|r| (r.agent_id, r.pick));
        assert_eq!(
            pick("helper").unwrap(),
            ("helper".into(), VersionPick::Latest)
        );
        assert_eq!(
            pick("helper:prod").unwrap(),
            ("helper".into(), VersionPick::Alias("prod".into()))
        );
        assert_eq!(
            pick("helper:latest").unwrap(),
            ("helper".into(), VersionPick::Latest)
        );
        assert_eq!(
            pick("helper@3").unwrap(),
            ("helper".into(), VersionPick::Number(3))
        );
        for bad in ["", "Helper", "helper@0", "helper@x", "helper:Prod", "a/b"] {
            let status = route(bad).unwrap_err();
            assert!(status.message().starts_with("tenant "), "{bad}: {status:?}");
        }
    }

    #[test]
    fn only_version_one_is_spoken_and_none_means_the_old_one() {
        let mut metadata = MetadataMap::new();
        assert!(check_version(&metadata).is_err());
        metadata.insert("a2a-version", "1.0".parse().unwrap());
        assert!(check_version(&metadata).is_ok());
        metadata.insert("a2a-version", "0.3".parse().unwrap());
        let status = check_version(&metadata).unwrap_err();
        assert_eq!(
            status.get_details_error_info().unwrap().reason,
            "VERSION_NOT_SUPPORTED"
        );
    }

    #[test]
    fn extensions_are_read_from_every_value() {
        let mut metadata = MetadataMap::new();
        assert!(!declared(&metadata, TOOL_CALLS_EXTENSION));
        metadata.append(
            "a2a-extensions",
            "urn:other, urn:agentrunner:a2a:tool-calls:v1"
                .parse()
                .unwrap(),
        );
        assert!(declared(&metadata, TOOL_CALLS_EXTENSION));
    }

    use tonic_types::StatusExt as _;
}
