//! Our messages in protobuf's JSON mapping, read and written by reflection over the
//! descriptor set the build embeds: the CLI speaks the same JSON as the console, grpcurl and
//! every generated client, and needs no second description of any message.

use std::sync::LazyLock;

use anyhow::Context;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use serde_json::Value;

use crate::pb;

/// The descriptors of `agentrunner.v1` and the well-known types it imports.
static POOL: LazyLock<Result<DescriptorPool, prost_reflect::DescriptorError>> =
    LazyLock::new(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET));

fn descriptor(name: &str) -> anyhow::Result<prost_reflect::MessageDescriptor> {
    let pool = POOL
        .as_ref()
        .map_err(|err| anyhow::anyhow!("the embedded descriptors do not decode: {err}"))?;
    pool.get_message_by_name(name)
        .with_context(|| format!("no message {name} in the embedded descriptors"))
}

/// `message` (of the protobuf type `name`) as JSON, fields under their proto names and
/// those at their defaults left out.
pub fn to_json<M: prost::Message>(name: &str, message: &M) -> anyhow::Result<Value> {
    let mut dynamic = DynamicMessage::new(descriptor(name)?);
    dynamic
        .transcode_from(message)
        .with_context(|| format!("{name} does not transcode"))?;
    let options = SerializeOptions::new().use_proto_field_name(true);
    Ok(dynamic.serialize_with_options(serde_json::value::Serializer, &options)?)
}

/// The fields of protobuf type `name` set to other than their defaults, in the message's
/// order, each with its value in the JSON mapping.
pub fn set_fields<M: prost::Message>(
    name: &str,
    message: &M,
) -> anyhow::Result<Vec<(String, Value)>> {
    let Value::Object(mut set) = to_json(name, message)? else {
        anyhow::bail!("{name} is not an object in JSON");
    };
    Ok(descriptor(name)?
        .fields()
        .filter_map(|field| Some((field.name().to_owned(), set.remove(field.name())?)))
        .collect())
}

/// The message of protobuf type `name` that `value` describes in the JSON mapping (proto or
/// camelCase field names, enums by name); an unknown field is an error naming it.
pub fn from_json<M: prost::Message + Default>(name: &str, value: Value) -> anyhow::Result<M> {
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let dynamic = DynamicMessage::deserialize_with_options(descriptor(name)?, value, &options)?;
    Ok(dynamic.transcode_to()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_goes_to_json_and_back() {
        let request = pb::CreateAgentRequest {
            agent_id: "helper".into(),
            config: Some(pb::AgentConfig {
                strategy: pb::Strategy::ChainOfThought.into(),
                max_iteration: 4,
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = to_json("agentrunner.v1.CreateAgentRequest", &request).unwrap();
        assert_eq!(json["agent_id"], "helper");
        assert_eq!(json["config"]["strategy"], "STRATEGY_CHAIN_OF_THOUGHT");
        assert!(json.get("name").is_none(), "defaults are left out: {json}");
        let back: pb::CreateAgentRequest =
            from_json("agentrunner.v1.CreateAgentRequest", json).unwrap();
        assert_eq!(back, request);
    }

    #[test]
    fn an_unknown_field_is_named() {
        let err = from_json::<pb::CreateAgentRequest>(
            "agentrunner.v1.CreateAgentRequest",
            serde_json::json!({"agent_id": "helper", "agent": {}}),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("agent"), "{err:#}");
    }

    #[test]
    fn a_struct_reads_as_its_json() {
        let value = pb::AgentConfig {
            output_schema: Some(prost_types::Struct {
                fields: [(
                    "type".to_owned(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue("object".into())),
                    },
                )]
                .into(),
            }),
            ..Default::default()
        };
        let json = to_json("agentrunner.v1.AgentConfig", &value).unwrap();
        assert_eq!(json["output_schema"], serde_json::json!({"type": "object"}));
    }
}
