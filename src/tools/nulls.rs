//! Nulls for optional fields. Models in strict mode send `null` for every optional field
//! they leave unset; a tool whose schema does not admit null would refuse the whole call, and
//! an API would receive `field=` for it. Such a null means "not given", so it is left out.

use serde_json::{json, Map, Value};

/// Whether a schema admits `null`: `type: null` (or in a type list), `nullable: true`
/// (OpenAPI 3.0), a `null` branch of `anyOf` / `oneOf`, or no type at all.
pub fn allows_null(schema: &Value) -> bool {
    let typed_null = match &schema["type"] {
        Value::String(kind) => kind == "null",
        Value::Array(kinds) => kinds.iter().any(|k| k == "null"),
        Value::Null => schema.as_object().is_some_and(is_untyped),
        Value::Bool(_) | Value::Number(_) | Value::Object(_) => false,
    };
    typed_null
        || schema["nullable"] == json!(true)
        || ["anyOf", "oneOf"].iter().any(|key| {
            schema[*key]
                .as_array()
                .is_some_and(|branches| branches.iter().any(allows_null))
        })
}

/// A schema that constrains nothing about the type (`{}`, or only a description).
fn is_untyped(schema: &Map<String, Value>) -> bool {
    const TYPED: [&str; 9] = [
        "type",
        "anyOf",
        "oneOf",
        "allOf",
        "enum",
        "const",
        "properties",
        "items",
        "$ref",
    ];
    !TYPED.iter().any(|key| schema.contains_key(*key))
}

/// Removes the top-level nulls `schema` does not ask for: a property that is optional and
/// whose own schema does not admit null. A null for a required property stays, so the
/// schema check names it.
pub fn drop_optional_nulls(schema: &Value, args: &mut Map<String, Value>) {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    args.retain(|name, value| {
        !value.is_null()
            || required.contains(&name.as_str())
            || schema["properties"].get(name).is_none_or(allows_null)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_nulls_go_and_the_others_stay() {
        let schema = json!({
            "type": "object",
            "properties": {
                "max_price": {"type": "number"},
                "tag": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "note": {"type": "string", "nullable": true},
                "id": {"type": "integer"},
                "anything": {"description": "free"}
            },
            "required": ["id"]
        });
        let mut args = json!({"max_price": null, "tag": null, "note": null, "id": null,
                              "anything": null, "extra": null, "q": 1})
        .as_object()
        .cloned()
        .unwrap_or_default();
        drop_optional_nulls(&schema, &mut args);
        let kept: Vec<&str> = args.keys().map(String::as_str).collect();
        assert_eq!(kept, vec!["anything", "extra", "id", "note", "q", "tag"]);
    }
}
