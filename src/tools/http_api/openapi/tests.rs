use serde_json::json;

use super::*;

fn parse(text: &str) -> Result<ApiDocument, SpecError> {
    super::parse(text, &SpecLimits::default())
}

const PETS: &str = r#"
openapi: 3.0.3
info:
  title: Pets
  description: A pet store
servers:
  - url: http://127.0.0.1:9/api
components:
  securitySchemes:
    key:
      type: apiKey
      in: header
      name: X-Pet-Key
  schemas:
    NewPet:
      type: object
      required: [name]
      properties:
        name: {type: string, description: The pet's name}
        tag: {$ref: '#/components/schemas/Tag'}
    Tag:
      type: string
      enum: [cat, dog]
paths:
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, schema: {type: integer}, description: Which pet}
    get:
      operationId: showPet
      summary: Show one pet
      parameters:
        - {name: verbose, in: query, schema: {type: boolean}}
  /pets:
    post:
      summary: Add a pet
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: '#/components/schemas/NewPet'}
"#;

#[test]
fn a_yaml_document_becomes_one_tool_per_operation() {
    let doc = parse(PETS).unwrap();
    assert_eq!(doc.description, "Pets: A pet store");
    assert_eq!(doc.server_url.as_deref(), Some("http://127.0.0.1:9/api"));
    assert_eq!(
        doc.api_key,
        Some(ApiKeyScheme {
            location: Location::Header,
            name: "X-Pet-Key".into()
        })
    );
    let names: Vec<&str> = doc.operations.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, vec!["post_pets", "showPet"]);

    let show = &doc.operations[1];
    assert_eq!(show.method, "GET");
    assert_eq!(show.description, "Show one pet");
    assert_eq!(
        show.schema["properties"]["petId"],
        json!({"type": "integer", "description": "Which pet"})
    );
    assert_eq!(show.schema["required"], json!(["petId"]));
    assert_eq!(show.parameters.len(), 2);

    let add = &doc.operations[0];
    assert_eq!(
        add.body,
        Some(Body {
            media: Media::Json,
            shape: BodyShape::Properties(vec!["name".into(), "tag".into()]),
            nullable: vec![],
        })
    );
    assert_eq!(
        add.schema["properties"]["tag"],
        json!({"type": "string", "enum": ["cat", "dog"]})
    );
    assert_eq!(add.schema["required"], json!(["name"]));
}

#[test]
fn json_documents_and_openapi_3_1_parse_too() {
    let doc = json!({"openapi": "3.1.0", "info": {"title": "T"}, "paths": {"/x": {"get": {"operationId": "getX"}}}});
    let parsed = parse(&doc.to_string()).unwrap();
    assert_eq!(parsed.operations[0].name, "getX");
}

#[test]
fn bad_documents_say_what_is_wrong_and_where() {
    assert_eq!(
        parse("swagger: '2.0'\npaths: {}"),
        Err(SpecError::NotOpenApi)
    );
    assert_eq!(
        parse("openapi: 3.0.0\npaths: {}"),
        Err(SpecError::NoOperations)
    );
    assert!(matches!(parse("{ not: [json"), Err(SpecError::Syntax(_))));
    let dangling = "openapi: 3.0.0\npaths:\n  /a:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: '#/components/schemas/Missing'}\n";
    assert_eq!(
        parse(dangling),
        Err(SpecError::UnresolvedRef {
            reference: "#/components/schemas/Missing".into(),
            at: "paths./a.post.requestBody.content.application/json.schema".into(),
        })
    );
}

#[test]
fn recursive_schemas_are_cut_instead_of_looping() {
    let doc = "openapi: 3.0.0\ncomponents:\n  schemas:\n    Node: {type: object, properties: {next: {$ref: '#/components/schemas/Node'}}}\npaths:\n  /n:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: '#/components/schemas/Node'}\n";
    assert!(parse(doc).is_ok());
}

/// The 500-byte bomb: a schema referring to itself three times, which naive inlining grows
/// to 3^16 nodes. The second visit of a reference is an open object instead.
#[test]
fn a_self_referring_schema_is_cut_at_its_second_visit() {
    let doc = r##"{"openapi": "3.0.0", "paths": {"/n": {"post": {"operationId": "node",
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}}},
        "components": {"schemas": {"Node": {"type": "object", "properties": {
            "a": {"$ref": "#/components/schemas/Node"},
            "b": {"$ref": "#/components/schemas/Node"},
            "c": {"$ref": "#/components/schemas/Node"}}}}}}"##;
    let parsed = parse(doc).unwrap();
    let schema = &parsed.operations[0].schema;
    assert_eq!(schema["properties"]["a"], json!({"type": "object"}));
    assert!(schema.to_string().len() < 400, "{schema}");
}

/// A schema that grows without recursion (each level uses the one below twice) is refused
/// once its expansion passes the limit, naming the operation.
#[test]
fn an_exponential_schema_is_refused_naming_the_operation() {
    let mut schemas = serde_json::Map::new();
    for level in 0..24 {
        let next = format!("#/components/schemas/L{}", level + 1);
        schemas.insert(
            format!("L{level}"),
            json!({"type": "object", "properties": {"x": {"$ref": next}, "y": {"$ref": next}}}),
        );
    }
    schemas.insert("L24".into(), json!({"type": "string"}));
    let doc = json!({"openapi": "3.0.0", "paths": {"/grow": {"post": {"operationId": "grow",
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}}}}},
        "components": {"schemas": schemas}});
    let err = parse(&doc.to_string()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "operation \"POST /grow\": its schema with $refs inlined is larger than runner.tool_schema_limit_bytes (65536)"
    );
}

#[test]
fn documents_are_bounded_in_size_and_operations() {
    let limits = SpecLimits {
        max_bytes: 100,
        ..SpecLimits::default()
    };
    let big = format!("openapi: 3.0.0\ninfo: {{title: '{}'}}", "x".repeat(200));
    assert!(matches!(
        super::parse(&big, &limits),
        Err(SpecError::TooLarge { limit: 100, .. })
    ));
    let paths: serde_json::Map<String, serde_json::Value> = (0..5)
        .map(|i| {
            (
                format!("/p{i}"),
                json!({"get": {"operationId": format!("op{i}")}}),
            )
        })
        .collect();
    let doc = json!({"openapi": "3.0.0", "paths": paths}).to_string();
    let few = SpecLimits {
        max_operations: 4,
        ..SpecLimits::default()
    };
    assert_eq!(
        super::parse(&doc, &few).unwrap_err().to_string(),
        "defines more than runner.openapi_max_operations (4) operations"
    );
    assert_eq!(
        super::parse(&doc, &SpecLimits::default())
            .unwrap()
            .operations
            .len(),
        5
    );
}

#[test]
fn the_method_or_x_idempotent_says_whether_a_call_may_be_made_again() {
    let doc = parse(
        r#"
openapi: 3.0.3
info: {title: Orders}
paths:
  /orders:
    get: {operationId: listOrders}
    post: {operationId: placeOrder}
  /orders/{id}:
    parameters: [{name: id, in: path, required: true, schema: {type: integer}}]
    put: {operationId: replaceOrder}
    delete: {operationId: cancelOrder, x-idempotent: false}
    patch: {operationId: renameOrder, x-idempotent: true}
"#,
    )
    .unwrap();
    let idempotent: Vec<(&str, bool)> = doc
        .operations
        .iter()
        .map(|op| (op.name.as_str(), op.idempotent))
        .collect();
    assert_eq!(
        idempotent,
        [
            ("listOrders", true),
            ("placeOrder", false),
            ("replaceOrder", true),
            ("cancelOrder", false),
            ("renameOrder", true),
        ]
    );
}
