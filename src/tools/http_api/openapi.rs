//! OpenAPI 3.0 and 3.1 documents (JSON or YAML) to operations with JSON Schema arguments.
//!
//! The document is read as a JSON value and walked directly: 3.1 schemas are JSON Schema
//! already and 3.0 schemas nearly are, so they pass through with their local `$ref`s
//! inlined. Typed OpenAPI models cover 3.0 only, which is why this does not use one.

use serde_json::{json, Map, Value};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// A document that cannot become tools, saying where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Neither JSON nor YAML.
    #[error("is neither JSON nor YAML: {0}")]
    Syntax(String),
    /// No `openapi: 3.x` field.
    #[error("is not an OpenAPI 3 document (it needs an `openapi: 3.x` field)")]
    NotOpenApi,
    /// No operation under `paths`.
    #[error("has no operations under `paths`")]
    NoOperations,
    /// A `$ref` that points nowhere (or outside the document).
    #[error("has a $ref {reference:?} at {at} that does not resolve")]
    UnresolvedRef {
        /// The reference.
        reference: String,
        /// Where it was found, as a path into the document.
        at: String,
    },
    /// The document is larger than the server accepts.
    #[error("is {bytes} bytes, more than runner.openapi_max_bytes ({limit})")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The document defines more operations than the server accepts.
    #[error("defines more than runner.openapi_max_operations ({limit}) operations")]
    TooManyOperations {
        /// The limit.
        limit: usize,
    },
    /// One operation's argument schema, with its `$ref`s inlined, is too large.
    #[error("operation {operation:?}: its schema with $refs inlined is larger than runner.tool_schema_limit_bytes ({limit})")]
    SchemaTooLarge {
        /// The operation, as `METHOD path`.
        operation: String,
        /// The limit.
        limit: usize,
    },
}

/// Bounds on what one document may cost to turn into tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecLimits {
    /// Largest document, in bytes.
    pub max_bytes: usize,
    /// Most operations.
    pub max_operations: usize,
    /// Largest expanded schema of one operation, in bytes of JSON.
    pub max_schema_bytes: usize,
}

impl Default for SpecLimits {
    fn default() -> Self {
        Self {
            max_bytes: 2 * 1024 * 1024,
            max_operations: 256,
            max_schema_bytes: 64 * 1024,
        }
    }
}

/// Where a parameter goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A `{name}` segment of the path.
    Path,
    /// A query-string pair.
    Query,
    /// A request header.
    Header,
    /// A cookie.
    Cookie,
}

/// How a parameter's value is written (OpenAPI's `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `name=value`, arrays repeated or comma-joined (query and cookie default).
    Form,
    /// Arrays joined by spaces.
    SpaceDelimited,
    /// Arrays joined by `|`.
    PipeDelimited,
    /// Objects as `name[key]=value`.
    DeepObject,
    /// Comma-separated (path and header default).
    Simple,
    /// `.value` path segments.
    Label,
    /// `;name=value` path segments.
    Matrix,
}

/// A parameter of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    /// Its name (also the argument's name).
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// How its value is written.
    pub style: Style,
    /// Whether arrays and objects are spread over several pairs (or `k=v` items).
    pub explode: bool,
    /// Whether a value must be given (path parameters always).
    pub required: bool,
}

/// The media type a request body is sent as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Media {
    /// `application/json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/form-data`; `files` are the fields sent as file parts.
    Multipart {
        /// Fields whose value is a file.
        files: Vec<String>,
    },
}

/// How the request body is built from the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// What it is sent as.
    pub media: Media,
    /// Which arguments make it.
    pub shape: BodyShape,
    /// Properties whose schema allows null: a null is sent for them, left out for others.
    pub nullable: Vec<String>,
}

/// Which arguments make a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyShape {
    /// An object body whose properties are top-level arguments.
    Properties(Vec<String>),
    /// Any other body, given as the `body` argument.
    Whole,
}

/// One callable operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// Tool name: the `operationId` when it is a valid tool name, else a valid name made
    /// from it (or from method and path), unique within the document.
    pub name: String,
    /// The `operationId`, when the tool name differs from it.
    pub original_name: Option<String>,
    /// Summary and description, for the model.
    pub description: String,
    /// Upper-case HTTP method.
    pub method: String,
    /// Path template, e.g. `/pets/{id}`.
    pub path: String,
    /// Path, query and header parameters.
    pub parameters: Vec<Parameter>,
    /// The JSON body, if the operation takes one.
    pub body: Option<Body>,
    /// JSON Schema of the tool's arguments.
    pub schema: Value,
    /// Whether calls carry the provider's credentials: not when the operation's (or the
    /// document's) `security` is `[]`.
    pub sends_credentials: bool,
    /// Whether a call may be made twice with the effect of once: the method says so
    /// (`GET`, `HEAD`, `PUT`, `DELETE`, `OPTIONS`) or the operation is marked
    /// `x-idempotent: true` (`false` overrides the method).
    pub idempotent: bool,
}

/// Whether an operation of `method` (lower case) marked as `op` may be made twice.
fn idempotent(method: &str, op: &Value) -> bool {
    match op["x-idempotent"].as_bool() {
        Some(marked) => marked,
        None => matches!(method, "get" | "head" | "put" | "delete" | "options"),
    }
}

/// Where an API key goes, from the document's `apiKey` security scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyScheme {
    /// `header` or `query`.
    pub location: Location,
    /// The header or query parameter name.
    pub name: String,
}

/// What a document offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiDocument {
    /// The API's title and description.
    pub description: String,
    /// Its first server URL, if absolute.
    pub server_url: Option<String>,
    /// Its first `apiKey` security scheme.
    pub api_key: Option<ApiKeyScheme>,
    /// Every operation.
    pub operations: Vec<Operation>,
}

/// Parses and converts a document, within `limits`.
pub fn parse(text: &str, limits: &SpecLimits) -> Result<ApiDocument, SpecError> {
    if text.len() > limits.max_bytes {
        return Err(SpecError::TooLarge {
            bytes: text.len(),
            limit: limits.max_bytes,
        });
    }
    let doc: Value = match serde_json::from_str(text) {
        Ok(doc) => doc,
        Err(_) => {
            serde_yaml_ng::from_str(text).map_err(|err| SpecError::Syntax(err.to_string()))?
        }
    };
    let version = doc
        .get("openapi")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !version.starts_with("3.") {
        return Err(SpecError::NotOpenApi);
    }
    let operations = operations(&doc, limits)?;
    if operations.is_empty() {
        return Err(SpecError::NoOperations);
    }
    let info = &doc["info"];
    let description = [info["title"].as_str(), info["description"].as_str()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ");
    Ok(ApiDocument {
        description,
        server_url: doc["servers"][0]["url"]
            .as_str()
            .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
            .map(str::to_owned),
        api_key: api_key_scheme(&doc),
        operations,
    })
}

fn operations(doc: &Value, limits: &SpecLimits) -> Result<Vec<Operation>, SpecError> {
    let Some(paths) = doc.get("paths").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<Operation> = Vec::new();
    let mut names = crate::tools::names::UniqueNames::default();
    for (path, item) in paths {
        let at = format!("paths.{path}");
        let item = path_item(doc, item, &at)?;
        let shared = item
            .get("parameters")
            .cloned()
            .unwrap_or(Value::Array(vec![]));
        for method in METHODS {
            let Some(op) = item.get(method) else {
                continue;
            };
            if out.len() == limits.max_operations {
                return Err(SpecError::TooManyOperations {
                    limit: limits.max_operations,
                });
            }
            let label = format!("{} {path}", method.to_uppercase());
            let mut resolver = Resolver::new(doc, limits.max_schema_bytes);
            let operation = operation(
                &mut resolver,
                path,
                method,
                op,
                &shared,
                &format!("{at}.{method}"),
            )
            .map_err(|err| err.at(&label))?;
            let mut operation = operation;
            let raw = op["operationId"]
                .as_str()
                .filter(|id| !id.trim().is_empty())
                .map_or_else(|| format!("{method}_{path}"), str::to_owned);
            operation.name = names.claim(&raw);
            operation.original_name =
                (operation.name != raw && op["operationId"].is_string()).then_some(raw);
            operation.sends_credentials = sends_credentials(doc, op);
            operation.idempotent = idempotent(method, op);
            if operation.schema.to_string().len() > limits.max_schema_bytes {
                return Err(SpecError::SchemaTooLarge {
                    operation: label,
                    limit: limits.max_schema_bytes,
                });
            }
            out.push(operation);
        }
    }
    Ok(out)
}

/// A path item, following a `$ref` to one (its operations are inlined one by one later).
fn path_item<'a>(doc: &'a Value, item: &'a Value, at: &str) -> Result<&'a Value, SpecError> {
    match item.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference
            .strip_prefix('#')
            .and_then(|pointer| doc.pointer(pointer))
            .ok_or_else(|| SpecError::UnresolvedRef {
                reference: reference.to_owned(),
                at: at.to_owned(),
            }),
        None => Ok(item),
    }
}

fn operation(
    resolver: &mut Resolver<'_>,
    path: &str,
    method: &str,
    op: &Value,
    shared: &Value,
    at: &str,
) -> Result<Operation, Expand> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut parameters = Vec::new();
    let all = shared
        .as_array()
        .into_iter()
        .flatten()
        .chain(op["parameters"].as_array().into_iter().flatten());
    for (index, parameter) in all.enumerate() {
        let parameter = resolver.resolve(parameter, &format!("{at}.parameters[{index}]"))?;
        let Some(place) = parameter_place(&parameter) else {
            continue;
        };
        let name = place.name.clone();
        let mut schema = resolver.resolve(
            &parameter["schema"],
            &format!("{at}.parameters[{index}].schema"),
        )?;
        if schema.is_null() {
            schema = json!({"type": "string"});
        }
        if let (Some(text), Some(map)) = (parameter["description"].as_str(), schema.as_object_mut())
        {
            map.entry("description").or_insert_with(|| json!(text));
        }
        if place.required {
            required.push(json!(name));
        }
        properties.insert(name.clone(), schema);
        parameters.retain(|p: &Parameter| p.name != name);
        parameters.push(place);
    }
    let body = request_body(resolver, op, at, &mut properties, &mut required)?;
    let description = [op["summary"].as_str(), op["description"].as_str()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Operation {
        name: String::new(),
        original_name: None,
        description: if description.is_empty() {
            format!("{} {path}", method.to_uppercase())
        } else {
            description
        },
        method: method.to_uppercase(),
        path: path.to_owned(),
        parameters,
        body,
        schema: json!({"type": "object", "properties": properties, "required": required}),
        sends_credentials: true,
        idempotent: false,
    })
}

/// A parameter's place and how it is written, with OpenAPI's defaults: `form` and
/// exploded in the query and cookies, `simple` and not exploded in the path and headers.
fn parameter_place(parameter: &Value) -> Option<Parameter> {
    let name = parameter["name"].as_str()?.to_owned();
    let location = match parameter["in"].as_str()? {
        "path" => Location::Path,
        "query" => Location::Query,
        "header" => Location::Header,
        "cookie" => Location::Cookie,
        _ => return None,
    };
    let default_style = match location {
        Location::Query | Location::Cookie => Style::Form,
        Location::Path | Location::Header => Style::Simple,
    };
    let style = match parameter["style"].as_str() {
        Some("form") => Style::Form,
        Some("spaceDelimited") => Style::SpaceDelimited,
        Some("pipeDelimited") => Style::PipeDelimited,
        Some("deepObject") => Style::DeepObject,
        Some("simple") => Style::Simple,
        Some("label") => Style::Label,
        Some("matrix") => Style::Matrix,
        _ => default_style,
    };
    let explode = parameter["explode"]
        .as_bool()
        .unwrap_or(style == Style::Form || style == Style::DeepObject);
    let required = location == Location::Path || parameter["required"].as_bool() == Some(true);
    Some(Parameter {
        name,
        location,
        style,
        explode,
        required,
    })
}

/// Whether an operation's calls carry credentials: its `security`, else the document's,
/// says so; an empty list means the operation is public. A document that declares no
/// security at all gets the credentials its provider was given.
fn sends_credentials(doc: &Value, op: &Value) -> bool {
    let security = op.get("security").or_else(|| doc.get("security"));
    !matches!(security.and_then(Value::as_array), Some(requirements) if requirements.is_empty())
}

/// OpenAPI 3.0's `nullable: true` as JSON Schema (`type: [T, "null"]`), which is what the
/// argument validator and the model providers understand.
fn nullable_as_type(mut schema: Map<String, Value>) -> Map<String, Value> {
    if schema.get("nullable") != Some(&json!(true)) {
        return schema;
    }
    if let Some(Value::String(kind)) = schema.get("type").cloned() {
        schema.insert("type".to_owned(), json!([kind, "null"]));
        if let Some(Value::Array(values)) = schema.get_mut("enum") {
            values.push(Value::Null);
        }
    }
    schema
}

/// Whether a multipart field carries a file: a binary string (`format: binary` in 3.0,
/// `contentMediaType` or `contentEncoding` in 3.1).
fn is_file_field(schema: &Value) -> bool {
    schema["format"] == "binary"
        || schema["format"] == "byte"
        || schema.get("contentMediaType").is_some()
        || schema.get("contentEncoding").is_some()
}

/// What the model sees for a file field.
fn file_field_schema(description: Option<&str>) -> Value {
    let what = "The file: its contents in base64 (or a data: URL), or the id of a file produced earlier in this run";
    let text = match description {
        Some(own) => format!("{own}. {what}"),
        None => what.to_owned(),
    };
    json!({"type": "string", "description": text})
}

/// Adds the JSON body's arguments: an object's properties at top level, anything else as
/// `body`.
fn request_body(
    resolver: &mut Resolver<'_>,
    op: &Value,
    at: &str,
    properties: &mut Map<String, Value>,
    required: &mut Vec<Value>,
) -> Result<Option<Body>, Expand> {
    let Some(body) = op.get("requestBody") else {
        return Ok(None);
    };
    let body = resolver.resolve(body, &format!("{at}.requestBody"))?;
    let Some((mut media, content)) = media_of(&body["content"]) else {
        return Ok(None);
    };
    let schema = resolver.resolve(&content["schema"], &format!("{at}.requestBody.schema"))?;
    let body_required = body["required"].as_bool() == Some(true);
    match schema.get("properties").and_then(Value::as_object) {
        Some(fields) if schema["type"] == "object" || schema.get("type").is_none() => {
            let names: Vec<String> = fields.keys().cloned().collect();
            let mut nullable = Vec::new();
            for (name, field) in fields {
                if crate::tools::nulls::allows_null(field) {
                    nullable.push(name.clone());
                }
                let field = match &mut media {
                    Media::Multipart { files } if is_file_field(field) => {
                        files.push(name.clone());
                        file_field_schema(field["description"].as_str())
                    }
                    Media::Json | Media::Form | Media::Multipart { .. } => field.clone(),
                };
                properties.entry(name.clone()).or_insert(field);
            }
            if body_required {
                required.extend(schema["required"].as_array().cloned().unwrap_or_default());
            }
            Ok(Some(Body {
                media,
                shape: BodyShape::Properties(names),
                nullable,
            }))
        }
        // A form is a set of fields: without properties there is nothing to send.
        _ if media != Media::Json => Ok(None),
        _ => {
            properties.insert("body".to_owned(), schema);
            if body_required {
                required.push(json!("body"));
            }
            Ok(Some(Body {
                media,
                shape: BodyShape::Whole,
                nullable: Vec::new(),
            }))
        }
    }
}

/// The body's media type, JSON first, then a URL-encoded form, then a multipart form.
fn media_of(content: &Value) -> Option<(Media, &Value)> {
    let types = content.as_object()?;
    let find = |wanted: &dyn Fn(&str) -> bool| {
        types
            .iter()
            .find(|(kind, _)| wanted(kind.as_str()))
            .map(|(_, value)| value)
    };
    if let Some(json) = find(&|kind| kind.contains("json")) {
        return Some((Media::Json, json));
    }
    if let Some(form) = find(&|kind| kind == "application/x-www-form-urlencoded") {
        return Some((Media::Form, form));
    }
    find(&|kind| kind == "multipart/form-data")
        .map(|multipart| (Media::Multipart { files: Vec::new() }, multipart))
}

/// Why inlining an operation's `$ref`s stopped.
#[derive(Debug)]
enum Expand {
    /// A reference that does not resolve.
    Unresolved(SpecError),
    /// The expansion outgrew the schema budget.
    TooLarge {
        /// The budget.
        limit: usize,
    },
}

impl Expand {
    /// The document error for operation `label` (`METHOD path`).
    fn at(self, label: &str) -> SpecError {
        match self {
            Expand::Unresolved(err) => err,
            Expand::TooLarge { limit } => SpecError::SchemaTooLarge {
                operation: label.to_owned(),
                limit,
            },
        }
    }
}

/// Inlines local `$ref`s for one operation, within a budget of work.
///
/// A reference met again while it is being inlined (a recursive schema) becomes an open
/// object schema instead of being followed, and every value built counts against the
/// budget, so a small document that refers to itself many times over cannot make the
/// expansion grow without bound.
struct Resolver<'a> {
    doc: &'a Value,
    /// References being inlined, outermost first.
    active: Vec<String>,
    /// Values built so far.
    nodes: usize,
    /// Most values to build: a JSON value takes at least one byte, so a schema within the
    /// byte limit never needs more.
    max_nodes: usize,
}

impl<'a> Resolver<'a> {
    fn new(doc: &'a Value, max_schema_bytes: usize) -> Self {
        Self {
            doc,
            active: Vec::new(),
            nodes: 0,
            max_nodes: max_schema_bytes,
        }
    }

    fn resolve(&mut self, value: &Value, at: &str) -> Result<Value, Expand> {
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Expand::TooLarge {
                limit: self.max_nodes,
            });
        }
        match value {
            Value::Object(map) => match map.get("$ref").and_then(Value::as_str) {
                Some(reference) => self.follow(reference, at),
                None => {
                    let mut out = Map::new();
                    for (key, item) in map {
                        out.insert(key.clone(), self.resolve(item, &format!("{at}.{key}"))?);
                    }
                    Ok(Value::Object(nullable_as_type(out)))
                }
            },
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.resolve(item, &format!("{at}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(value.clone()),
        }
    }

    fn follow(&mut self, reference: &str, at: &str) -> Result<Value, Expand> {
        if self.active.iter().any(|r| r == reference) {
            return Ok(json!({"type": "object"}));
        }
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| self.doc.pointer(pointer))
            .ok_or_else(|| {
                Expand::Unresolved(SpecError::UnresolvedRef {
                    reference: reference.to_owned(),
                    at: at.to_owned(),
                })
            })?;
        self.active.push(reference.to_owned());
        let resolved = self.resolve(target, reference);
        self.active.pop();
        resolved
    }
}

fn api_key_scheme(doc: &Value) -> Option<ApiKeyScheme> {
    let schemes = doc.pointer("/components/securitySchemes")?.as_object()?;
    schemes.values().find_map(|scheme| {
        if scheme["type"] != "apiKey" {
            return None;
        }
        let location = match scheme["in"].as_str()? {
            "header" => Location::Header,
            "query" => Location::Query,
            _ => return None,
        };
        Some(ApiKeyScheme {
            location,
            name: scheme["name"].as_str()?.to_owned(),
        })
    })
}

#[cfg(test)]
mod tests;
