//! The HTTP API with `api_tokens`: every route refuses a request without a
//! known bearer token with 401 (Sequin's error shape, `WWW-Authenticate:
//! Bearer`) and serves it with one; probes and webhook-source posts (which
//! their source authenticates) need none; a pull consumer sending the token
//! receives as before.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

const TOKEN: &str = "ci-token-0123456789abcdef";
const OTHER: &str = "ops-token-0123456789abcdef";

/// Every route of the API but the exempt ones, with a request body where
/// one is needed.
fn routes() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (Method::GET, "/metrics", None),
        (Method::GET, "/api/health", None),
        (Method::GET, "/api/config/export", None),
        (Method::GET, "/api/change_retentions", None),
        (Method::GET, "/api/sinks", None),
        (Method::GET, "/api/sinks/pull", None),
        (Method::GET, "/api/postgres_databases", None),
        (Method::GET, "/api/postgres_databases/shop", None),
        (Method::GET, "/api/destinations/http_endpoints", None),
        (Method::GET, "/api/destinations/http_endpoints/hook", None),
        (Method::GET, "/api/change_retentions/nope", None),
        (Method::GET, "/api/sinks/pull/dead_letters", None),
        (
            Method::POST,
            "/api/sinks/pull/dead_letters/replay",
            Some(json!({})),
        ),
        (Method::GET, "/api/sinks/pull/dead_letters/1", None),
        (Method::DELETE, "/api/sinks/pull/dead_letters/1", None),
        (Method::POST, "/api/sinks/pull/dead_letters/1/replay", None),
        (Method::GET, "/api/sinks/pull/backfills", None),
        (
            Method::POST,
            "/api/sinks/pull/backfills",
            Some(json!({"table": "public.items"})),
        ),
        (Method::GET, "/api/sinks/pull/backfills/x", None),
        (Method::DELETE, "/api/sinks/pull/backfills/x", None),
        (Method::POST, "/api/sinks/pull/backfills/x/pause", None),
        (Method::POST, "/api/sinks/pull/backfills/x/resume", None),
        (Method::GET, "/api/sinks/pull/quarantine", None),
        (Method::DELETE, "/api/sinks/pull/quarantine", None),
        (Method::GET, "/api/http_pull_consumers/pull/receive", None),
        (
            Method::POST,
            "/api/http_pull_consumers/pull/receive",
            Some(json!({})),
        ),
        (
            Method::POST,
            "/api/http_pull_consumers/pull/ack",
            Some(json!({"ack_ids": []})),
        ),
        (
            Method::POST,
            "/api/http_pull_consumers/pull/nack",
            Some(json!({"ack_ids": []})),
        ),
        (Method::GET, "/api/sequin_streams/pull/receive", None),
        (Method::GET, "/api/webhook_sources/inbox", None),
        (Method::GET, "/api/plugins", None),
        (
            Method::POST,
            "/api/plugins?name=p&version=1&kind=filter",
            None,
        ),
        (Method::GET, "/api/plugins/p", None),
        (Method::GET, "/api/plugins/p/1", None),
        (Method::DELETE, "/api/plugins/p/1", None),
        (Method::GET, "/api/functions", None),
        (Method::GET, "/api/functions/f", None),
        (Method::GET, "/api/no/such/route", None),
    ]
}

fn send(
    weft: &WeftProcess,
    method: &Method,
    path: &str,
    body: &Option<Value>,
    token: Option<&str>,
) -> (u16, Option<String>, Value) {
    let mut request = http().request(method.clone(), weft.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, challenge, response.json().unwrap_or(Value::Null))
}

#[test]
fn every_route_asks_for_a_configured_token_but_probes_and_webhook_posts() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let config = format!(
        "{databases}api_tokens:\n  - {{ name: ci, token: \"{TOKEN}\" }}\n  - {{ name: ops, token: \"{OTHER}\" }}\n\
         http_endpoints:\n  - {{ name: hook, url: \"http://127.0.0.1:9\", encrypted_headers: {{ Authorization: \"Bearer very-secret-value\" }} }}\n\
         webhook_sources:\n  - {{ name: inbox, auth: {{ bearer_token: source-secret-0123456789 }} }}\n\
         sinks:\n  - {{ name: pull, database: shop, destination: {{ type: sequin_stream }} }}\n\
         \x20 - {{ name: hooks, source: {{ webhook: inbox }}, destination: {{ type: sequin_stream }} }}\n",
        databases = pg.databases_yaml("weft_auth"),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_auth", &config);

    for (method, path, body) in routes() {
        for token in [
            None,
            Some("wrong-token-0123456789abc"),
            Some(&TOKEN[..TOKEN.len() - 1]),
        ] {
            let (status, challenge, error) = send(&weft, &method, path, &body, token);
            assert_eq!(status, 401, "{method} {path} with {token:?}: {error}");
            assert_eq!(challenge.as_deref(), Some("Bearer"), "{method} {path}");
            let summary = error["summary"].as_str().unwrap();
            assert!(summary.contains("Authorization: Bearer"), "{summary}");
            assert!(error["validation_errors"].is_object(), "{error}");
        }
        for token in [TOKEN, OTHER] {
            let (status, _, body) = send(&weft, &method, path, &body, Some(token));
            assert_ne!(status, 401, "{method} {path} with a good token: {body}");
        }
    }
    // The management resources show the config's entries, secrets redacted.
    let get = |path: &str| send(&weft, &Method::GET, path, &None, Some(TOKEN)).2;
    let sinks = get("/api/sinks");
    let names: Vec<&str> = sinks["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pull", "hooks"], "{sinks}");
    let pull = get("/api/sinks/pull");
    assert_eq!(pull["destination"]["type"], "sequin_stream", "{pull}");
    assert_eq!(pull["status"], "active");
    assert_eq!(pull["id"].as_str().unwrap().len(), 36);
    assert_eq!(
        get("/api/postgres_databases/shop")["slot"]["name"],
        "weft_auth"
    );
    let endpoint = get("/api/destinations/http_endpoints/hook");
    assert_eq!(
        endpoint["encrypted_headers"]["Authorization"], "(redacted)",
        "{endpoint}"
    );
    assert!(
        !get("/api/destinations/http_endpoints")
            .to_string()
            .contains("very-secret")
    );
    let (status, _, missing) = send(&weft, &Method::GET, "/api/sinks/nope", &None, Some(TOKEN));
    assert_eq!(status, 404, "{missing}");
    assert!(
        missing["summary"]
            .as_str()
            .unwrap()
            .contains("GET /api/sinks lists them")
    );

    for probe in ["/health", "/health/ready"] {
        assert_eq!(
            send(&weft, &Method::GET, probe, &None, None).0,
            200,
            "{probe}"
        );
    }
    // A webhook source authenticates its own posts.
    let posted = http()
        .post(weft.url("/api/webhook_sources/inbox"))
        .bearer_auth("source-secret-0123456789")
        .json(&json!({"hello": "world"}))
        .send()
        .unwrap();
    assert_eq!(posted.status().as_u16(), 202);
    // A pull consumer sending the token receives and acks as before.
    pg.psql("INSERT INTO items VALUES (1, 'one')");
    let got = weft.wait_until("the message", std::time::Duration::from_secs(30), || {
        let (status, _, body) = send(
            &weft,
            &Method::GET,
            "/api/http_pull_consumers/pull/receive?batch_size=10&wait_for=1000",
            &None,
            Some(TOKEN),
        );
        match body["data"].as_array() {
            Some(data) if status == 200 && !data.is_empty() => Ok(data.clone()),
            _ => Err(body),
        }
    });
    assert_eq!(got[0]["data"]["record"]["v"], "one");
    let ack_id = got[0]["ack_id"].clone();
    let (status, _, _) = send(
        &weft,
        &Method::POST,
        "/api/http_pull_consumers/pull/ack",
        &Some(json!({ "ack_ids": [ack_id] })),
        Some(TOKEN),
    );
    assert_eq!(status, 200);
    assert_eq!(weft.terminate(), Some(0));
}
