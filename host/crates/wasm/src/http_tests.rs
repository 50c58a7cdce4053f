//! The outbound-http capability against real HTTP servers on loopback, with
//! the `weft-http-enrichment` guest (one `GET <url>?ids=...` per batch).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::outbound_http::MAX_BODY_BYTES;
use super::*;
use crate::http_egress::HttpEgress;
use crate::test_support::{config, engine, guest, message};
use weft_core::change::Action;

/// A lookup API on 127.0.0.1 with its own runtime, counting the requests it
/// receives.
struct LookupApi {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    runtime: tokio::runtime::Runtime,
}

#[derive(serde::Deserialize)]
struct Ids {
    ids: String,
}

impl LookupApi {
    /// Routes: `/lookup?ids=1,2` answers `{"1": {"name": "n1"}, ...}`;
    /// `/big` a JSON body of `MAX_BODY_BYTES + extra` bytes (with a
    /// content-length), `/big-stream` the same streamed without one; `/slow`
    /// answers after 5 s; `/redirect` is a 302 to `?to=`.
    fn start() -> LookupApi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let counted = Arc::clone(&requests);
        let app = axum::Router::new()
            .route("/lookup", axum::routing::get(lookup))
            .route("/big", axum::routing::get(big))
            .route("/big-stream", axum::routing::get(big_stream))
            .route("/slow", axum::routing::get(slow))
            .route("/lookup-slowly", axum::routing::get(lookup_slowly))
            .route("/redirect", axum::routing::get(redirect))
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    next.run(request)
                },
            ));
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        LookupApi {
            addr,
            requests,
            runtime,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The capability allowing `entries`.
    fn http(&self, entries: &[&str]) -> OutboundHttp {
        self.http_with(entries, HttpEgress::Any)
    }

    /// The capability allowing `entries` at the addresses `egress` allows.
    fn http_with(&self, entries: &[&str], egress: HttpEgress) -> OutboundHttp {
        let allow = entries
            .iter()
            .map(|e| AllowedHost::parse(e).unwrap())
            .collect();
        OutboundHttp::new("lookup", allow, egress, self.runtime.handle().clone()).unwrap()
    }
}

async fn lookup(Query(Ids { ids }): Query<Ids>) -> axum::Json<Value> {
    let found: serde_json::Map<String, Value> = ids
        .split(',')
        .filter(|id| *id != "404")
        .map(|id| (id.to_string(), json!({"name": format!("n{id}")})))
        .collect();
    axum::Json(Value::Object(found))
}

/// A JSON body `{"1": "xxx..."}` of exactly `MAX_BODY_BYTES + extra` bytes.
fn sized_body(extra: i64) -> Vec<u8> {
    let frame = br#"{"1":""}"#.len() as i64;
    let fill = (MAX_BODY_BYTES as i64 + extra - frame) as usize;
    format!(r#"{{"1":"{}"}}"#, "x".repeat(fill)).into_bytes()
}

#[derive(serde::Deserialize)]
struct Extra {
    extra: i64,
}

async fn big(Query(Extra { extra }): Query<Extra>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        sized_body(extra),
    )
}

async fn big_stream(Query(Extra { extra }): Query<Extra>) -> impl IntoResponse {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = sized_body(extra)
        .chunks(64 * 1024)
        .map(|c| Ok(c.to_vec()))
        .collect();
    axum::body::Body::from_stream(futures::stream::iter(chunks))
}

/// `/lookup`'s answer after 300 ms.
async fn lookup_slowly(ids: Query<Ids>) -> axum::Json<Value> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    lookup(ids).await
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_secs(5)).await;
    "{}"
}

#[derive(serde::Deserialize)]
struct To {
    to: String,
}

async fn redirect(Query(To { to }): Query<To>) -> impl IntoResponse {
    (StatusCode::FOUND, [(header::LOCATION, to)])
}

fn load(url: &str, http: Option<OutboundHttp>, limits: &Limits) -> EnrichmentFunction {
    engine()
        .load_enrichment(
            "lookup",
            &guest("weft-http-enrichment"),
            &config(&[("url", url)]),
            limits,
            Grants {
                http,
                ..Grants::default()
            },
        )
        .expect("load the http enrichment")
}

fn row(id: i64) -> weft_core::message::Message {
    message(Action::Insert, json!({"id": id}), None)
}

/// The guest's outcome for a one-change batch, expecting a transient error.
fn transient_error(function: &mut EnrichmentFunction, id: i64) -> String {
    let outcomes = function.enrich(&[row(id)]).expect("the call itself works");
    match &outcomes[0] {
        Err(FunctionError::Transient(reason)) => reason.clone(),
        other => panic!("expected a transient error, got {other:?}"),
    }
}

/// A listener that is never served: any connection to it stays in its
/// accept queue, where `accept` finds it.
fn untouched_listener() -> TcpListener {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

fn assert_no_connection(listener: &TcpListener) {
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("expected no connection, got {other:?}"),
    }
}

#[test]
fn an_allowed_host_returns_data_into_the_enrichment() {
    let api = LookupApi::start();
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    let mut function = load(
        &api.url("/lookup"),
        Some(api.http(&[&allowed])),
        &Limits::default(),
    );
    let batch = [
        row(1),
        row(404),
        message(Action::Insert, json!({"name": "no id"}), None),
        row(2),
    ];
    let outcomes = function.enrich(&batch).unwrap();
    let got: Vec<Option<Value>> = outcomes.into_iter().map(|o| o.unwrap()).collect();
    assert_eq!(
        got,
        vec![
            Some(json!({"http": {"name": "n1"}})),
            Some(json!({"http": null})),
            None,
            Some(json!({"http": {"name": "n2"}})),
        ]
    );
    assert_eq!(api.requests(), 1, "one request for the whole batch");

    // A host entry without a port allows every port of that host.
    let mut any_port = load(
        &api.url("/lookup"),
        Some(api.http(&["127.0.0.1"])),
        &Limits::default(),
    );
    let outcomes = any_port.enrich(&[row(7)]).unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap(),
        &Some(json!({"http": {"name": "n7"}}))
    );
}

#[test]
fn waiting_for_an_answer_does_not_count_against_the_accounts_cpu_share() {
    let api = LookupApi::start();
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    // 1% of a core: were the 300 ms each call waits counted, the second
    // call would wait 20 s for the first one's debt.
    let limits = Limits {
        cpu_share: Some(CpuShare::new("patient", 0.01)),
        ..Limits::default()
    };
    let mut function = load(
        &api.url("/lookup-slowly"),
        Some(api.http(&[&allowed])),
        &limits,
    );
    let started = Instant::now();
    for id in 1..=3 {
        let outcomes = function.enrich(&[row(id)]).unwrap();
        assert_eq!(
            outcomes[0].as_ref().unwrap(),
            &Some(json!({"http": {"name": format!("n{id}")}}))
        );
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "each call waited: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the share throttled waits: {took:?}"
    );
    assert_eq!(api.requests(), 3);
}

#[test]
fn a_host_off_the_list_is_refused_without_a_connection() {
    let target = untouched_listener();
    let port = target.local_addr().unwrap().port();
    let api = LookupApi::start();
    // Same address, another port; and a name that is not the address.
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    let mut function = load(
        &format!("http://127.0.0.1:{port}/lookup"),
        Some(api.http(&[&allowed, "localhost"])),
        &Limits::default(),
    );
    let reason = transient_error(&mut function, 1);
    assert!(
        reason.contains(&format!(
            "host `127.0.0.1:{port}` is not on the HTTP allow-list of function `lookup`"
        )) && reason.contains(&format!("add `127.0.0.1` (any port) or `127.0.0.1:{port}`"))
            && reason.contains("grants.http.allow_hosts")
            && reason.contains("no request was sent"),
        "{reason}"
    );
    assert_no_connection(&target);
    assert_eq!(api.requests(), 0);
}

#[test]
fn an_account_denying_internal_http_reaches_no_loopback_host_even_a_listed_one() {
    let api = LookupApi::start();
    let port = api.addr.port();
    let denied = HttpEgress::PublicOnly {
        account: "acme".into(),
    };
    for host in ["127.0.0.1", "localhost"] {
        let mut function = load(
            &format!("http://{host}:{port}/lookup"),
            Some(api.http_with(&["127.0.0.1", "localhost"], denied.clone())),
            &Limits::default(),
        );
        let reason = transient_error(&mut function, 1);
        assert!(
            reason.contains("is an internal address")
                && reason.contains("account \"acme\" sets `deny_internal_http: true`"),
            "{host}: {reason}"
        );
    }
    assert_eq!(api.requests(), 0, "no request reached the listed host");

    // The same grants without the account's denial reach it.
    let mut allowed = load(
        &format!("http://localhost:{port}/lookup"),
        Some(api.http(&["127.0.0.1", "localhost"])),
        &Limits::default(),
    );
    let outcomes = allowed.enrich(&[row(3)]).unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap(),
        &Some(json!({"http": {"name": "n3"}}))
    );
    assert_eq!(api.requests(), 1);
}

#[test]
fn a_component_importing_outbound_http_without_the_grant_is_refused_at_load() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Granting the source query does not grant HTTP.
    let source_query = SourceQuery::new(
        "lookup",
        tokio_postgres::Config::new(),
        Duration::from_secs(1),
        runtime.handle().clone(),
    );
    for grants in [
        Grants::default(),
        Grants {
            source_query: Some(source_query),
            http: None,
        },
    ] {
        let error = engine()
            .load_enrichment(
                "lookup",
                &guest("weft-http-enrichment"),
                &config(&[("url", "http://127.0.0.1:1/")]),
                &Limits::default(),
                grants,
            )
            .unwrap_err();
        match &error {
            PluginError::Ungranted { imports, .. } => {
                assert_eq!(imports, &["weft:plugin/outbound-http@0.2.0".to_string()])
            }
            other => panic!("expected Ungranted, got {other:?}"),
        }
        let text = error.to_string();
        assert!(
            text.contains(
                "imports capabilities it is not granted: `weft:plugin/outbound-http@0.2.0`"
            ) && text.contains("grants: {http: {allow_hosts: [...]}}"),
            "{text}"
        );
    }
}

#[test]
fn a_body_above_the_cap_is_an_error_and_one_at_the_cap_is_not() {
    let api = LookupApi::start();
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    let limits = Limits {
        call_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    for path in ["/big", "/big-stream"] {
        let mut at_cap = load(
            &api.url(&format!("{path}?extra=0&")),
            Some(api.http(&[&allowed])),
            &limits,
        );
        let outcomes = at_cap.enrich(&[row(1)]).unwrap();
        let value = outcomes[0].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(
            value["http"].as_str().map(str::len),
            Some(MAX_BODY_BYTES - 8),
            "{path}: a body of exactly the cap arrives whole"
        );

        let mut above = load(
            &api.url(&format!("{path}?extra=1&")),
            Some(api.http(&[&allowed])),
            &limits,
        );
        let reason = transient_error(&mut above, 1);
        assert!(
            reason.contains("the response body is larger than 1048576 bytes (the cap)")
                && reason.contains(&format!("127.0.0.1:{}", api.addr.port())),
            "{path}: {reason}"
        );
    }
}

#[test]
fn a_slow_server_times_out_within_the_call_budget_and_the_guest_handles_it() {
    let api = LookupApi::start();
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    let limits = Limits {
        call_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let mut function = load(&api.url("/slow"), Some(api.http(&[&allowed])), &limits);
    let started = Instant::now();
    let reason = transient_error(&mut function, 1);
    let elapsed = started.elapsed();
    assert!(
        reason.contains("timed out after") && reason.contains("timeout_ms"),
        "{reason}"
    );
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(1),
        "the request used the call's budget less the reserve: {elapsed:?}"
    );
    assert_eq!(api.requests(), 1);
}

#[test]
fn redirects_are_returned_not_followed() {
    let api = LookupApi::start();
    let target = untouched_listener();
    let target_port = target.local_addr().unwrap().port();
    let allowed = format!("127.0.0.1:{}", api.addr.port());
    let mut function = load(
        &api.url(&format!(
            "/redirect?to=http://127.0.0.1:{target_port}/lookup&"
        )),
        // Even a redirect to an allowed host is not followed.
        Some(api.http(&[&allowed, &format!("127.0.0.1:{target_port}")])),
        &Limits::default(),
    );
    let reason = transient_error(&mut function, 1);
    assert_eq!(reason, "lookup API answered status 302");
    assert_no_connection(&target);
}
