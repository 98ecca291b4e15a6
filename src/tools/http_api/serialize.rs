//! Parameter values written as OpenAPI's `style` and `explode` say: `form` (exploded:
//! `tags=red&tags=blue`), `spaceDelimited`, `pipeDelimited`, `deepObject`
//! (`filter[color]=red`) in the query; `simple` (`3,4,5`), `label` (`.3.4.5`) and `matrix`
//! (`;id=3,4,5`) in the path; `simple` in headers. Nulls never reach here: an absent or
//! null value is left out.

use serde_json::{Map, Value};

use super::openapi::{Parameter, Style};

/// A scalar as text; a nested array or object (which no style defines) as JSON.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

/// An object's entries without nulls, which are left out as absent values are.
fn entries(map: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    map.iter().filter(|(_, value)| !value.is_null())
}

/// Query (or cookie, or form-body) pairs of one parameter.
pub fn pairs(parameter: &Parameter, value: &Value) -> Vec<(String, String)> {
    let name = &parameter.name;
    let joined = |items: &[Value], separator: &str| {
        items
            .iter()
            .filter(|item| !item.is_null())
            .map(scalar)
            .collect::<Vec<_>>()
            .join(separator)
    };
    match (value, parameter.style, parameter.explode) {
        (Value::Array(items), Style::SpaceDelimited, false) => {
            vec![(name.clone(), joined(items, " "))]
        }
        (Value::Array(items), Style::PipeDelimited, false) => {
            vec![(name.clone(), joined(items, "|"))]
        }
        (Value::Array(items), _, true) => items
            .iter()
            .filter(|item| !item.is_null())
            .map(|item| (name.clone(), scalar(item)))
            .collect(),
        (Value::Array(items), _, false) => vec![(name.clone(), joined(items, ","))],
        (Value::Object(map), Style::DeepObject, _) => entries(map)
            .map(|(key, item)| (format!("{name}[{key}]"), scalar(item)))
            .collect(),
        (Value::Object(map), _, true) => entries(map)
            .map(|(key, item)| (key.clone(), scalar(item)))
            .collect(),
        (Value::Object(map), _, false) => {
            let flat: Vec<String> = entries(map)
                .flat_map(|(key, item)| [key.clone(), scalar(item)])
                .collect();
            vec![(name.clone(), flat.join(","))]
        }
        (scalar_value, _, _) => vec![(name.clone(), scalar(scalar_value))],
    }
}

/// A path segment (`simple`, `label` or `matrix`) or a header value (`simple`).
pub fn segment(parameter: &Parameter, value: &Value) -> String {
    let name = &parameter.name;
    let explode = parameter.explode;
    let items: Vec<String> = match value {
        Value::Array(items) => items
            .iter()
            .filter(|item| !item.is_null())
            .map(scalar)
            .collect(),
        Value::Object(map) if explode => entries(map)
            .map(|(key, item)| format!("{key}={}", scalar(item)))
            .collect(),
        Value::Object(map) => entries(map)
            .flat_map(|(key, item)| [key.clone(), scalar(item)])
            .collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => vec![scalar(value)],
    };
    match parameter.style {
        Style::Label if explode => items.iter().map(|item| format!(".{item}")).collect(),
        Style::Label => format!(".{}", items.join(",")),
        Style::Matrix if explode && value.is_array() => {
            items.iter().map(|item| format!(";{name}={item}")).collect()
        }
        Style::Matrix if explode && value.is_object() => {
            items.iter().map(|item| format!(";{item}")).collect()
        }
        Style::Matrix => format!(";{name}={}", items.join(",")),
        Style::Simple
        | Style::Form
        | Style::SpaceDelimited
        | Style::PipeDelimited
        | Style::DeepObject => items.join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::http_api::openapi::Location;
    use serde_json::json;

    fn parameter(location: Location, style: Style, explode: bool) -> Parameter {
        Parameter {
            name: "p".into(),
            location,
            style,
            explode,
            required: false,
        }
    }

    fn query(style: Style, explode: bool, value: Value) -> String {
        pairs(&parameter(Location::Query, style, explode), &value)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    }

    // Objects come out in key order (serde_json's maps are sorted).
    #[test]
    fn query_styles_follow_the_specification_table() {
        let colors = json!(["blue", "black", "brown"]);
        let rgb = json!({"R": 100, "G": 200, "B": 150});
        assert_eq!(query(Style::Form, true, json!(5)), "p=5");
        assert_eq!(
            query(Style::Form, true, colors.clone()),
            "p=blue&p=black&p=brown"
        );
        assert_eq!(
            query(Style::Form, false, colors.clone()),
            "p=blue,black,brown"
        );
        assert_eq!(query(Style::Form, true, rgb.clone()), "B=150&G=200&R=100");
        assert_eq!(
            query(Style::Form, false, rgb.clone()),
            "p=B,150,G,200,R,100"
        );
        assert_eq!(
            query(Style::SpaceDelimited, false, colors.clone()),
            "p=blue black brown"
        );
        assert_eq!(
            query(Style::PipeDelimited, false, colors.clone()),
            "p=blue|black|brown"
        );
        assert_eq!(
            query(Style::DeepObject, true, rgb),
            "p[B]=150&p[G]=200&p[R]=100"
        );
        assert_eq!(query(Style::Form, true, json!(["a", null, "b"])), "p=a&p=b");
        assert_eq!(
            query(Style::DeepObject, true, json!({"a": 1, "b": null})),
            "p[a]=1"
        );
    }

    #[test]
    fn path_styles_follow_the_specification_table() {
        let seg = |style, explode, value: Value| {
            segment(&parameter(Location::Path, style, explode), &value)
        };
        let colors = json!(["blue", "black", "brown"]);
        let rgb = json!({"R": 100, "G": 200, "B": 150});
        assert_eq!(seg(Style::Simple, false, json!(5)), "5");
        assert_eq!(
            seg(Style::Simple, false, colors.clone()),
            "blue,black,brown"
        );
        assert_eq!(seg(Style::Simple, false, rgb.clone()), "B,150,G,200,R,100");
        assert_eq!(seg(Style::Simple, true, rgb.clone()), "B=150,G=200,R=100");
        assert_eq!(seg(Style::Label, false, json!(5)), ".5");
        assert_eq!(
            seg(Style::Label, false, colors.clone()),
            ".blue,black,brown"
        );
        assert_eq!(seg(Style::Label, true, colors.clone()), ".blue.black.brown");
        assert_eq!(seg(Style::Matrix, false, json!(5)), ";p=5");
        assert_eq!(
            seg(Style::Matrix, false, colors.clone()),
            ";p=blue,black,brown"
        );
        assert_eq!(seg(Style::Matrix, true, colors), ";p=blue;p=black;p=brown");
        assert_eq!(seg(Style::Matrix, true, rgb), ";B=150;G=200;R=100");
    }
}
