//! What an API provider sends: parameters serialized as the document's `style` and
//! `explode` say, nulls left out, form and multipart bodies, credentials only where the
//! document's `security` asks for them, and what an empty answer reads as. A scripted HTTP
//! API records every request exactly as it arrived.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use agent_runner::pb;
use agent_runner::pb::provider_source::Source;
use agent_runner::pb::tool_registry_client::ToolRegistryClient;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tonic::transport::Channel;

use crate::support::{final_thoughts, run_request, run_to_end, TestServer};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

/// One request as the API received it.
#[derive(Clone, Debug)]
struct Received {
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Received {
    /// The query as the API decodes it, in order.
    fn query_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.query.as_bytes())
            .into_owned()
            .collect()
    }

    /// The body as a URL-encoded form, decoded.
    fn form_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(&self.body)
            .into_owned()
            .collect()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn body_contains(&self, needle: &[u8]) -> bool {
        self.body.windows(needle.len()).any(|w| w == needle)
    }
}

type Log = Arc<Mutex<Vec<Received>>>;

/// The PNG the API's `/chart` answers with.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nscripted";

async fn answer(
    State(log): State<Log>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    log.lock().unwrap().push(Received {
        method: method.clone(),
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_owned(),
        headers,
        body: body.to_vec(),
    });
    match (method, path.as_str()) {
        (Method::DELETE, _) => StatusCode::NO_CONTENT.into_response(),
        (_, "/api/empty") => (StatusCode::OK, "").into_response(),
        (_, "/api/chart") => ([("content-type", "image/png")], PNG).into_response(),
        _ => Json(json!({"ok": true})).into_response(),
    }
}

async fn scripted_api() -> (SocketAddr, Log) {
    let log: Log = Arc::default();
    let router = Router::new().fallback(answer).with_state(Arc::clone(&log));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, log)
}

/// A shop API in the shape FastAPI generates (OpenAPI 3.1, `anyOf` with null for optional
/// values, operationIds with double underscores), plus one operation per serialization
/// style, body media type and security rule.
fn shop_spec(addr: SocketAddr) -> String {
    format!(
        r#"
openapi: 3.1.0
info: {{title: Shop}}
servers: [{{url: "http://{addr}/api"}}]
components:
  securitySchemes:
    key: {{type: apiKey, in: header, name: X-Api-Key}}
security: [{{key: []}}]
paths:
  /items/{{item_id}}:
    get:
      operationId: read_item_items__item_id__get
      parameters:
        - {{name: item_id, in: path, required: true, schema: {{type: integer}}}}
        - {{name: tags, in: query, schema: {{type: array, items: {{type: string}}}}}}
        - {{name: max_price, in: query, schema: {{type: number}}}}
        - {{name: q, in: query, schema: {{anyOf: [{{type: string}}, {{type: "null"}}]}}}}
        - {{name: X-Trace, in: header, schema: {{type: string}}}}
        - {{name: session, in: cookie, schema: {{type: string}}}}
    delete:
      operationId: delete_item
      parameters:
        - {{name: item_id, in: path, required: true, schema: {{type: integer}}}}
  /search:
    get:
      operationId: search.items
      parameters:
        - {{name: ids, in: query, style: spaceDelimited, explode: false,
            schema: {{type: array, items: {{type: integer}}}}}}
        - {{name: cats, in: query, style: pipeDelimited, explode: false,
            schema: {{type: array, items: {{type: string}}}}}}
        - {{name: colors, in: query, explode: false, schema: {{type: array, items: {{type: string}}}}}}
        - {{name: filter, in: query, style: deepObject,
            schema: {{type: object, properties: {{color: {{type: string}}, size: {{type: string}}}}}}}}
        - {{name: point, in: query, schema: {{type: object, properties: {{x: {{type: integer}}, y: {{type: integer}}}}}}}}
        - {{name: box, in: query, explode: false, schema: {{type: object, properties: {{w: {{type: integer}}, h: {{type: integer}}}}}}}}
  /search-again:
    get:
      operationId: "search:items"
  /paths/{{plain}}/{{labelled}}/{{matrixed}}/{{obj}}:
    get:
      operationId: paths
      parameters:
        - {{name: plain, in: path, required: true, schema: {{type: array, items: {{type: string}}}}}}
        - {{name: labelled, in: path, required: true, style: label, explode: true,
            schema: {{type: array, items: {{type: string}}}}}}
        - {{name: matrixed, in: path, required: true, style: matrix, explode: true,
            schema: {{type: array, items: {{type: string}}}}}}
        - {{name: obj, in: path, required: true, explode: true,
            schema: {{type: object, properties: {{x: {{type: integer}}, y: {{type: integer}}}}}}}}
        - {{name: X-Dims, in: header, schema: {{type: object, properties: {{w: {{type: integer}}, h: {{type: integer}}}}}}}}
  /forms:
    post:
      operationId: submit_form
      requestBody:
        required: true
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              properties:
                name: {{type: string}}
                tags: {{type: array, items: {{type: string}}}}
                note: {{type: string}}
              required: [name]
  /upload:
    post:
      operationId: upload
      requestBody:
        required: true
        content:
          multipart/form-data:
            schema:
              type: object
              properties:
                title: {{type: string}}
                file: {{type: string, format: binary, description: The picture}}
              required: [file]
  /health:
    get:
      operationId: health
      security: []
  /empty:
    get:
      operationId: touch
  /chart:
    get:
      operationId: chart
"#
    )
}

/// The scripted API registered as provider `shop`, the model playing `replies`.
struct Shop {
    log: Log,
    llm: FakeOpenAi,
    server: TestServer,
    tools: ToolRegistryClient<Channel>,
}

impl Shop {
    async fn start(replies: Vec<Reply>) -> Self {
        let (api, log) = scripted_api().await;
        let llm = FakeOpenAi::start(replies).await;
        let server = TestServer::start(&llm.base_url()).await;
        let mut tools = server.tools().await;
        create_shop(&mut tools, api).await;
        Self {
            log,
            llm,
            server,
            tools,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    async fn listed(&mut self) -> Vec<pb::ToolDescriptor> {
        self.tools
            .list_tools(pb::ListToolsRequest {
                provider: "shop".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .tools
    }

    async fn invoke(&mut self, name: &str, arguments: serde_json::Value) -> pb::InvokeToolResponse {
        self.tools
            .invoke_tool(pb::InvokeToolRequest {
                provider: "shop".into(),
                name: name.into(),
                arguments: arguments.to_string(),
                parameters: None,
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn run(&self, query: &str, tools: &[(&str, &str)]) -> Vec<pb::RunEvent> {
        run_to_end(&mut self.server.agents().await, run_request(query, tools)).await
    }
}

async fn create_shop(tools: &mut ToolRegistryClient<Channel>, api: SocketAddr) {
    tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(pb::ToolProvider {
                name: "shop".into(),
                source: Some(pb::ProviderSource {
                    source: Some(Source::Openapi(pb::OpenApiSource {
                        spec: shop_spec(api),
                        server_url: String::new(),
                    })),
                }),
                credentials: [("api_key".to_owned(), "shop-secret".to_owned())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Query, path, header and cookie values are written in each style the document names,
/// with OpenAPI's defaults where it names none: an array query parameter is one pair per
/// value (`tags=red&tags=blue`), not one JSON text.
#[tokio::test]
async fn parameters_are_serialized_as_the_document_says() {
    let mut shop = Shop::start(vec![]).await;

    shop.invoke(
        "read_item_items__item_id__get",
        json!({"item_id": 7, "tags": ["red", "blue"], "q": "soft toy", "X-Trace": "t-1",
               "session": "abc"}),
    )
    .await;
    shop.invoke(
        "search.items",
        json!({"ids": [3, 4, 5], "cats": ["a", "b"], "colors": ["red", "blue"],
               "filter": {"color": "red", "size": "L"}, "point": {"x": 1, "y": 2},
               "box": {"h": 3, "w": 4}}),
    )
    .await;
    shop.invoke(
        "paths",
        json!({"plain": ["red", "blue"], "labelled": ["red", "blue"],
               "matrixed": ["red", "blue"], "obj": {"x": 1, "y": 2}, "X-Dims": {"h": 3, "w": 4}}),
    )
    .await;

    let seen = shop.received();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let item = &seen[0];
    assert_eq!(
        (&item.method, item.path.as_str()),
        (&Method::GET, "/api/items/7")
    );
    assert_eq!(item.query, "tags=red&tags=blue&q=soft+toy");
    assert_eq!(item.header("x-trace"), Some("t-1"));
    assert_eq!(item.header("cookie"), Some("session=abc"));

    assert_eq!(
        seen[1].query_pairs(),
        pairs(&[
            ("ids", "3 4 5"),
            ("cats", "a|b"),
            ("colors", "red,blue"),
            ("filter[color]", "red"),
            ("filter[size]", "L"),
            ("x", "1"),
            ("y", "2"),
            ("box", "h,3,w,4"),
        ])
    );
    assert_eq!(
        seen[2].path,
        "/api/paths/red,blue/.red.blue/;matrixed=red;matrixed=blue/x=1,y=2"
    );
    assert_eq!(seen[2].header("x-dims"), Some("h,3,w,4"));
}

/// Strict-mode models send null for every optional field: such nulls (and absent values)
/// are left out of the query, headers and path. A null for a required parameter is a
/// validation error the model reads, and no request is made for it.
#[tokio::test]
async fn nulls_are_left_out_and_a_required_null_never_reaches_the_api() {
    let shop = Shop::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new(
                    "n1",
                    "read_item_items__item_id__get",
                    &[r#"{"item_id": 3, "max_price": null, "q": null, "tags": null, "X-Trace": null, "session": null}"#],
                ),
                ScriptedCall::new(
                    "n2",
                    "read_item_items__item_id__get",
                    &[r#"{"item_id": null, "q": "x"}"#],
                ),
            ],
            (1, 1),
        ),
        Reply::text(&["Done."], (1, 1)),
    ])
    .await;

    let events = shop
        .run("Item 3?", &[("shop", "read_item_items__item_id__get")])
        .await;

    let calls = &final_thoughts(&events)[0].tool_calls;
    assert_eq!(calls[0].observation, r#"{"ok":true}"#);
    assert!(
        calls[1]
            .observation
            .starts_with("tool parameters validation error: item_id: null is not of type"),
        "{}",
        calls[1].observation
    );
    let seen = shop.received();
    assert_eq!(seen.len(), 1, "only the valid call reached the API");
    assert_eq!(
        (seen[0].path.as_str(), seen[0].query.as_str()),
        ("/api/items/3", "")
    );
    assert_eq!(seen[0].header("x-trace"), None);
    assert_eq!(seen[0].header("cookie"), None);
}

/// A form-only operation sends its fields URL-encoded; a multipart one sends file parts
/// from base64 text, a `data:` URL, or the id of a file an earlier tool of the run made,
/// which the model read in that tool's observation.
#[tokio::test]
async fn form_and_multipart_bodies_carry_fields_and_files() {
    let mut shop = Shop::start(vec![
        Reply::calls(&[], vec![ScriptedCall::new("c", "chart", &["{}"])], (1, 1)),
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "u",
                "upload",
                &[r#"{"title": "from the run", "file": "{file}"}"#],
            )],
            (1, 1),
        ),
        Reply::text(&["Uploaded."], (1, 1)),
    ])
    .await;

    let listed = shop.listed().await;
    let form = listed.iter().find(|t| t.name == "submit_form").unwrap();
    let schema = format!("{:?}", form.parameters_schema);
    assert!(
        schema.contains("\"name\"") && schema.contains("\"tags\""),
        "{schema}"
    );

    shop.invoke(
        "submit_form",
        json!({"name": "Ann Lee", "tags": ["a", "b"], "note": null}),
    )
    .await;
    shop.invoke(
        "upload",
        json!({"title": "hello", "file": "data:text/plain;base64,aGVsbG8gd29ybGQ="}),
    )
    .await;
    shop.invoke("upload", json!({"file": "aGk="})).await;
    let bad = shop.invoke("upload", json!({"file": "not base64!"})).await;
    assert_eq!(
        bad.observation,
        "tool parameters validation error: file must be a file: base64, a data: URL, or the id \
         of a file of this run, please check your tool parameters"
    );

    let events = shop
        .run("Upload a chart", &[("shop", "chart"), ("shop", "upload")])
        .await;
    let thoughts = final_thoughts(&events);
    let chart_file = &thoughts[0].file_ids[0];
    assert!(
        thoughts[0].tool_calls[0]
            .observation
            .ends_with(&format!("[file {chart_file}: chart.png]")),
        "{}",
        thoughts[0].tool_calls[0].observation
    );
    assert_eq!(thoughts[1].tool_calls[0].observation, r#"{"ok":true}"#);

    let seen = shop.received();
    let form = &seen[0];
    assert_eq!(
        form.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        form.form_pairs(),
        pairs(&[("name", "Ann Lee"), ("tags", "a"), ("tags", "b")])
    );

    let text_upload = &seen[1];
    assert!(text_upload
        .header("content-type")
        .unwrap()
        .starts_with("multipart/form-data; boundary="));
    assert!(text_upload.body_contains(b"name=\"title\"\r\n\r\nhello\r\n"));
    assert!(text_upload.body_contains(
        b"name=\"file\"; filename=\"file.txt\"\r\nContent-Type: text/plain\r\n\r\nhello world\r\n"
    ));
    let bare_base64 = &seen[2];
    assert!(bare_base64.body_contains(b"application/octet-stream\r\n\r\nhi\r\n"));

    let run_upload = seen.last().unwrap();
    assert_eq!(run_upload.path, "/api/upload");
    assert!(run_upload.body_contains(b"Content-Type: image/png\r\n\r\n"));
    assert!(run_upload.body_contains(PNG), "the chart's bytes were sent");
    assert_eq!(seen.len(), 5, "the refused upload sent nothing: {seen:?}");
}

/// The key goes only where the document's `security` asks for it: every operation under
/// the global requirement, none to an operation whose `security` is `[]`.
#[tokio::test]
async fn credentials_follow_each_operations_security() {
    let mut shop = Shop::start(vec![]).await;

    shop.invoke("health", json!({})).await;
    shop.invoke("read_item_items__item_id__get", json!({"item_id": 1}))
        .await;

    let seen = shop.received();
    assert_eq!(seen[0].path, "/api/health");
    assert_eq!(seen[0].header("x-api-key"), None, "a public operation");
    assert_eq!(seen[1].header("x-api-key"), Some("shop-secret"));
}

/// An empty answer says so, naming its status, and a binary one comes back to a direct
/// call as a file with its bytes.
#[tokio::test]
async fn empty_and_binary_answers_say_what_came_back() {
    let mut shop = Shop::start(vec![]).await;

    let deleted = shop.invoke("delete_item", json!({"item_id": 9})).await;
    assert_eq!(deleted.observation, "HTTP 204, no content");
    assert_eq!(shop.received()[0].method, Method::DELETE);
    let touched = shop.invoke("touch", json!({})).await;
    assert_eq!(touched.observation, "HTTP 200, no content");

    let chart = shop.invoke("chart", json!({})).await;
    assert_eq!(chart.files.len(), 1);
    let file = &chart.files[0];
    assert_eq!(
        (
            file.name.as_str(),
            file.mime_type.as_str(),
            file.content.as_slice()
        ),
        ("chart.png", "image/png", PNG)
    );
    assert_eq!((file.size, file.omitted), (PNG.len() as u64, false));
}

/// An operationId that is a valid tool name is the tool's name exactly; another is made
/// valid and unique, ListTools shows both, and either names the tool in InvokeTool and in
/// a run's tool list.
#[tokio::test]
async fn tool_names_keep_valid_operation_ids_and_map_the_others() {
    let mut shop = Shop::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new("s", "search_items", &["{\"ids\": [1]}"])],
            (1, 1),
        ),
        Reply::text(&["Found."], (1, 1)),
    ])
    .await;

    let listed = shop.listed().await;
    let names: Vec<(&str, &str)> = listed
        .iter()
        .map(|t| (t.name.as_str(), t.original_name.as_str()))
        .collect();
    for expected in [
        ("read_item_items__item_id__get", ""),
        ("search_items", "search.items"),
        ("search_items_2", "search:items"),
    ] {
        assert!(names.contains(&expected), "{expected:?} in {names:?}");
    }

    let by_valid = shop.invoke("search_items", json!({"ids": [1]})).await;
    let by_original = shop.invoke("search.items", json!({"ids": [2]})).await;
    assert_eq!(by_valid.observation, by_original.observation);

    let events = shop.run("Find 1", &[("shop", "search.items")]).await;
    let offered = &shop.llm.requests()[0]["tools"][0]["function"]["name"];
    assert_eq!(
        offered, "search_items",
        "the model is offered the valid name"
    );
    assert_eq!(
        final_thoughts(&events)[0].tool_calls[0].observation,
        r#"{"ok":true}"#
    );
    assert_eq!(shop.received().len(), 3);
}
