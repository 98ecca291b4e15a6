//! An order API's OpenAPI description as a tool provider: `placeOrder` (`POST /orders`,
//! which must not be made twice) and `showOrder` (`GET /orders/{id}`, idempotent), on the
//! test's own server at `addr`.

use agent_runner::pb;

/// The `orders` provider of the API at `http://{addr}/api`.
pub fn orders_provider(addr: std::net::SocketAddr) -> pb::ToolProvider {
    let spec = format!(
        r#"
openapi: 3.0.3
info: {{title: Orders}}
servers: [{{url: "http://{addr}/api"}}]
paths:
  /orders:
    post:
      operationId: placeOrder
      requestBody:
        content:
          application/json:
            schema: {{type: object, properties: {{item: {{type: string}}}}, required: [item]}}
  /orders/{{id}}:
    get:
      operationId: showOrder
      parameters:
        - {{name: id, in: path, required: true, schema: {{type: integer}}}}
"#
    );
    pb::ToolProvider {
        name: "orders".into(),
        source: Some(pb::ProviderSource {
            source: Some(pb::provider_source::Source::Openapi(pb::OpenApiSource {
                spec,
                server_url: String::new(),
            })),
        }),
        ..Default::default()
    }
}
