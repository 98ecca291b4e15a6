//! Request bodies by media type: JSON, URL-encoded forms and multipart forms (file fields
//! given as base64 or as a `data:` URL). A null the schema does not allow is left out, as
//! strict-mode models send null for every optional field.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::openapi::{Body, BodyShape, Location, Media, Parameter, Style};
use super::serialize;
use crate::tools::ToolError;

/// `request` with the body `args` make.
pub fn attach(
    request: reqwest::RequestBuilder,
    body: &Body,
    args: &Map<String, Value>,
) -> Result<reqwest::RequestBuilder, ToolError> {
    let names = match &body.shape {
        BodyShape::Whole => {
            return Ok(request.json(args.get("body").unwrap_or(&Value::Null)));
        }
        BodyShape::Properties(names) => names,
    };
    let fields = names.iter().filter_map(|name| {
        let value = args.get(name)?;
        (!value.is_null() || body.nullable.contains(name)).then_some((name, value))
    });
    match &body.media {
        Media::Json => {
            let object: Map<String, Value> = fields.map(|(n, v)| (n.clone(), v.clone())).collect();
            Ok(request.json(&object))
        }
        Media::Form => {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            for (name, value) in fields.filter(|(_, value)| !value.is_null()) {
                form.extend_pairs(serialize::pairs(&form_field(name), value));
            }
            Ok(request
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(form.finish()))
        }
        Media::Multipart { files } => {
            let mut form = reqwest::multipart::Form::new();
            for (name, value) in fields.filter(|(_, value)| !value.is_null()) {
                form = if files.contains(name) {
                    form.part(name.clone(), file_part(name, value)?)
                } else {
                    serialize::pairs(&form_field(name), value)
                        .into_iter()
                        .fold(form, |form, (key, text)| form.text(key, text))
                };
            }
            Ok(request.multipart(form))
        }
    }
}

/// A form field written as a query parameter of `form` style, exploded.
fn form_field(name: &str) -> Parameter {
    Parameter {
        name: name.to_owned(),
        location: Location::Query,
        style: Style::Form,
        explode: true,
        required: false,
    }
}

/// A file part from base64 text or a `data:` URL.
fn file_part(name: &str, value: &Value) -> Result<reqwest::multipart::Part, ToolError> {
    let text = value.as_str().unwrap_or_default().trim();
    let (mime, data) = match text
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((mime, data)) => (mime, data),
        None => ("application/octet-stream", text),
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(data))
        .map_err(|_| {
            ToolError::InvalidArguments(format!(
                "{name} must be a file: base64, a data: URL, or the id of a file of this run"
            ))
        })?;
    let extension = crate::tools::extension_for(mime);
    reqwest::multipart::Part::bytes(bytes)
        .file_name(format!("{name}.{extension}"))
        .mime_str(mime)
        .map_err(|_| {
            ToolError::InvalidArguments(format!("{name} has an invalid MIME type {mime:?}"))
        })
}
