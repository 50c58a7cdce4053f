//! Webhook sources through the real binary: messages POSTed to weft run
//! through a WASM transform into a pull sink and a webhook sink; duplicates
//! by `Idempotency-Key` are delivered once; bad credentials and bodies get
//! precise 4xx and store nothing; an accepted message survives a SIGKILL;
//! a source's feed that fails restarts alone and loses nothing.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::guests;
use crate::harness::webhook_receiver::{Mode, Receiver, SECRET, TOKEN};
use crate::harness::weft::{WeftProcess, http};

const BEARER: &str = "in-t0ken-7";
const HMAC_SECRET: &str = "in-s3cret-9";

/// Two sources (bearer and signed) and, for `orders_in`, a pull sink with
/// the upcase transform; `extra_sinks` are appended.
fn config(extra_sinks: &str, extra_top: &str) -> String {
    format!(
        r#"
webhook_sources:
  - name: orders_in
    auth: {{ bearer_token: "${{IN_TOKEN}}" }}
    max_body_bytes: 4096
  - name: signed_in
    auth: {{ hmac_secret: "${{IN_SECRET}}" }}
functions:
  - name: upcase
    type: transform
    file: {transform}
    config: {{ column: item }}
sinks:
  - name: orders
    source: {{ webhook: orders_in }}
    transform: upcase
    destination: {{ type: sequin_stream }}
  - name: signed
    source: {{ webhook: signed_in }}
    destination: {{ type: sequin_stream }}
{extra_sinks}{extra_top}"#,
        transform = guests::wasm("weft_upcase_transform").display(),
    )
}

fn start(dir: &std::path::Path, config: &str) -> WeftProcess {
    WeftProcess::start_with_env(
        dir,
        config,
        &[("IN_TOKEN", BEARER), ("IN_SECRET", HMAC_SECRET)],
    )
}

/// POSTs `body` to the source `source` with `headers`; returns the status
/// and the JSON answer.
fn post(weft: &WeftProcess, source: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut request = http()
        .post(weft.url(&format!("/api/webhook_sources/{source}")))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("POST to the webhook source");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn bearer() -> (&'static str, String) {
    ("authorization", format!("Bearer {BEARER}"))
}

fn post_bearer(weft: &WeftProcess, body: &str, key: Option<&str>) -> (u16, Value) {
    let (name, value) = bearer();
    let mut headers = vec![(name, value.as_str())];
    if let Some(key) = key {
        headers.push(("idempotency-key", key));
    }
    post(weft, "orders_in", &headers, body)
}

fn signature(secret: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// POSTs `body` to `signed_in`, signed with its secret.
fn post_signed(weft: &WeftProcess, body: &str) -> (u16, Value) {
    post(
        weft,
        "signed_in",
        &[("x-weft-signature", &signature(HMAC_SECRET, body))],
        body,
    )
}

fn stored_requests(weft: &WeftProcess, source: &str) -> usize {
    count_rows(weft, "webhook_requests", "source", source)
}

/// Waits until the log of source `orders_in` is pruned: every sink stored
/// its requests.
fn wait_until_pruned(weft: &WeftProcess, timeout: Duration) {
    weft.wait_until(
        "the source's log pruned",
        timeout,
        || match stored_requests(weft, "orders_in") {
            0 => Ok(()),
            left => Err(left),
        },
    );
}

/// How many rows of the store's `table` have `column` = `value`.
fn count_rows(weft: &WeftProcess, table: &str, column: &str, value: &str) -> usize {
    weft.store_query(&format!(
        "SELECT count(*) || '' FROM {table} WHERE {column} = '{value}'"
    ))[0]
        .parse()
        .unwrap()
}

/// An error answer in the API's shape whose summary contains `summary`.
fn assert_error(answer: &(u16, Value), status: u16, summary: &str) {
    assert_eq!(answer.0, status, "{answer:?}");
    assert!(
        answer.1["summary"]
            .as_str()
            .unwrap_or_default()
            .contains(summary),
        "{answer:?}"
    );
    assert!(answer.1["validation_errors"].is_object(), "{answer:?}");
}

#[test]
fn messages_are_transformed_and_delivered_in_order_to_pull_and_push_sinks_once_per_key() {
    let receiver = Receiver::start(Mode::Accept);
    let dir = tempfile::tempdir().unwrap();
    let hook = "  - name: hook\n    source: { webhook: orders_in }\n    destination: { type: webhook, http_endpoint: receiver }\n";
    let endpoint = format!(
        "http_endpoints:\n  - name: receiver\n    url: http://{}\n    headers: {{ X-Test: plain }}\n    encrypted_headers: {{ Authorization: \"{TOKEN}\" }}\n    signing_secret: {SECRET}\n",
        receiver.addr
    );
    let weft = start(dir.path(), &config(hook, &endpoint));

    let first = post_bearer(&weft, r#"{"n": 1, "item": "pen"}"#, Some("order-1"));
    assert_eq!(first.0, 202, "{first:?}");
    assert_eq!(first.1["accepted"], 1);
    assert_eq!(first.1["duplicate"], false);
    let batch = post_bearer(
        &weft,
        r#"{"data": [{"n": 2, "item": "ink"}, {"n": 3, "item": "cap"}]}"#,
        None,
    );
    assert_eq!(batch.0, 202, "{batch:?}");
    assert_eq!(batch.1["accepted"], 2);
    // A retry with the same key is accepted, said to be a duplicate, and
    // not delivered again, even with another body.
    let again = post_bearer(&weft, r#"{"n": 1, "item": "pen"}"#, Some("order-1"));
    assert_eq!(
        (again.0, &again.1["duplicate"]),
        (200, &json!(true)),
        "{again:?}"
    );
    let changed = post_bearer(&weft, r#"{"n": 99, "item": "x"}"#, Some("order-1"));
    assert_eq!(changed.1["duplicate"], true, "{changed:?}");
    assert_eq!(
        post_bearer(&weft, r#"{"n": 4, "item": "nib"}"#, Some("order-4")).0,
        202
    );

    let got = weft.drain("orders", 4, Duration::from_secs(60));
    let items: Vec<(i64, &str)> = got
        .iter()
        .map(|m| {
            (
                m["record"]["n"].as_i64().unwrap(),
                m["record"]["item"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        items,
        vec![(1, "PEN"), (2, "INK"), (3, "CAP"), (4, "NIB")],
        "the transform ran on each message, in acceptance order"
    );
    let m = &got[1];
    assert_eq!(m["action"], "insert");
    assert_eq!(m["record"]["transformed_by"], "weft-upcase");
    assert_eq!(m["metadata"]["table_schema"], "webhook");
    assert_eq!(m["metadata"]["table_name"], "orders_in");
    assert_eq!(m["metadata"]["database_name"], "webhook");
    assert_eq!(m["metadata"]["consumer"]["name"], "orders");
    let keys: std::collections::HashSet<&str> = got
        .iter()
        .map(|m| m["metadata"]["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 4, "each message has its own key: {got:?}");
    // Nothing more: the duplicates were not delivered.
    assert!(weft.receive("orders", 10, 1500).is_empty());

    receiver.wait_until("4 messages at the receiver", Duration::from_secs(60), |s| {
        s.accepted.len() >= 4
    });
    std::thread::sleep(Duration::from_millis(500));
    let pushed: Vec<i64> = receiver.with(|s| {
        s.accepted
            .iter()
            .map(|(_, m)| m["record"]["n"].as_i64().unwrap())
            .collect()
    });
    assert_eq!(
        pushed,
        vec![1, 2, 3, 4],
        "the push sink, untransformed, in order"
    );
    let untransformed = receiver.with(|s| s.accepted[0].1.clone());
    assert_eq!(untransformed["metadata"]["webhook_source"], "orders_in");
    assert_eq!(untransformed["record"], json!({"n": 1, "item": "pen"}));
    assert!(receiver.with(|s| s.bad_requests.is_empty()));
    // Every sink stored them, so the source's log was pruned.
    wait_until_pruned(&weft, Duration::from_secs(10));
    assert!(!weft.log_text().contains(BEARER), "the token was logged");
}

#[test]
fn wrong_credentials_get_401_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let weft = start(dir.path(), &config("", ""));
    let body = r#"{"n": 1}"#;

    let wrong = post(
        &weft,
        "signed_in",
        &[("x-weft-signature", &signature("not-the-secret", body))],
        body,
    );
    assert_error(&wrong, 401, "signature does not match");
    let missing = post(&weft, "signed_in", &[], body);
    assert_error(&missing, 401, "missing `X-Weft-Signature");
    // Signed for another body.
    let other = post(
        &weft,
        "signed_in",
        &[("x-weft-signature", &signature(HMAC_SECRET, r#"{"n": 2}"#))],
        body,
    );
    assert_error(&other, 401, "signature does not match");
    assert_error(
        &post(&weft, "orders_in", &[], body),
        401,
        "missing `Authorization",
    );
    assert_error(
        &post(
            &weft,
            "orders_in",
            &[("authorization", "Bearer in-t0ken-8")],
            body,
        ),
        401,
        "bearer token does not match",
    );
    assert_eq!(stored_requests(&weft, "signed_in"), 0);
    assert_eq!(stored_requests(&weft, "orders_in"), 0);
    assert!(weft.receive("signed", 10, 500).is_empty());

    let good = post_signed(&weft, body);
    assert_eq!(good.0, 202, "{good:?}");
    let got = weft.drain("signed", 1, Duration::from_secs(30));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["record"], json!({"n": 1}));
    let log = weft.log_text();
    assert!(
        !log.contains(HMAC_SECRET) && !log.contains(BEARER),
        "a secret was logged"
    );
}

#[test]
fn bad_bodies_and_unknown_sources_get_precise_4xx() {
    let dir = tempfile::tempdir().unwrap();
    let weft = start(dir.path(), &config("", ""));
    let big = format!(r#"{{"pad": "{}"}}"#, "x".repeat(5000));
    assert_error(
        &post_bearer(&weft, &big, None),
        413,
        "max_body_bytes (4096 bytes)",
    );
    let malformed = post_bearer(&weft, r#"{"n": 1"#, None);
    assert_error(&malformed, 400, "not valid JSON");
    assert!(
        malformed.1["validation_errors"]["body"].is_array(),
        "{malformed:?}"
    );
    assert_error(
        &post_bearer(&weft, "[1, 2]", None),
        400,
        "must be a JSON object",
    );
    let element = post_bearer(&weft, r#"{"data": [{"n": 1}, "two"]}"#, None);
    assert_error(&element, 400, "data[1] must be a JSON object");
    assert!(
        element.1["validation_errors"]["data"].is_array(),
        "{element:?}"
    );
    let long_key = "k".repeat(256);
    let bad_key = post_bearer(&weft, r#"{"n": 1}"#, Some(&long_key));
    assert_error(&bad_key, 400, "1 to 255 visible ASCII characters");
    assert!(
        bad_key.1["validation_errors"]["Idempotency-Key"].is_array(),
        "{bad_key:?}"
    );
    assert_error(
        &post(&weft, "nope", &[], "{}"),
        404,
        "no webhook source named \"nope\"",
    );
    assert_eq!(stored_requests(&weft, "orders_in"), 0);
    // A body at the limit is fine.
    let fits = format!(r#"{{"pad": "{}"}}"#, "x".repeat(4096 - 11));
    assert_eq!(fits.len(), 4096);
    assert_eq!(post_bearer(&weft, &fits, None).0, 202);
}

#[test]
fn a_message_accepted_just_before_a_sigkill_is_delivered_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    // A backlog of 5 pauses the source's pipeline, so most accepted requests
    // are in the source's log only, not yet stored for the sink.
    let paused = config("", "").replace(
        "    transform: upcase\n",
        "    transform: upcase\n    max_backlog_messages: 5\n",
    );
    let mut weft = start(dir.path(), &paused);
    let accept = |n: i64| {
        let (status, answer) =
            post_bearer(&weft, &format!(r#"{{"n": {n}, "item": "i{n}"}}"#), None);
        assert_eq!(status, 202, "{answer:?}");
    };
    // The first requests fill the backlog (a batch may overshoot it); the
    // rest then stay in the source's log, whatever the machine's speed.
    (1..=6).for_each(accept);
    weft.wait_until_every(
        "the backlog filled",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || match weft.stored_count("orders") {
            stored if stored >= 5 => Ok(()),
            stored => Err(stored),
        },
    );
    (7..=20).for_each(accept);
    let only_in_log = stored_requests(&weft, "orders_in");
    assert!(only_in_log >= 14, "{only_in_log} requests in the log");
    weft.kill();
    weft.restart();
    let got = weft.drain("orders", 20, Duration::from_secs(90));
    let ns: Vec<i64> = got
        .iter()
        .map(|m| m["record"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (1..=20).collect::<Vec<_>>(), "each once, in order");
    assert!(
        got.iter()
            .all(|m| m["record"]["item"].as_str().unwrap().starts_with('I'))
    );
    assert!(weft.receive("orders", 10, 1500).is_empty(), "nothing twice");
}

#[test]
fn a_failed_webhook_source_feed_restarts_alone_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let weft = start(dir.path(), &config("", ""));
    // The store refuses to prune `orders_in`'s log (as a failing disk
    // would, for this one source): its feed fails once its first request
    // is stored for the sink, which used to end the whole process.
    weft.store_execute(
        "CREATE TRIGGER refuse_prune BEFORE DELETE ON webhook_requests
         WHEN old.source = 'orders_in' BEGIN SELECT RAISE(ABORT, 'the disk refused the write'); END",
    );
    let accept = |n: i64| {
        let (status, answer) =
            post_bearer(&weft, &format!(r#"{{"n": {n}, "item": "i{n}"}}"#), None);
        assert_eq!(status, 202, "{answer:?}");
    };
    (1..=3).for_each(accept);
    let message = weft.wait_for_failed_check("webhook_source", "orders_in", "feed");
    assert!(
        message.contains("the disk refused the write") && message.contains("restarts in"),
        "{message}"
    );

    // The API keeps accepting, and the other source keeps flowing.
    (4..=6).for_each(accept);
    let body = r#"{"n": 7, "item": "signed"}"#;
    let signed = post_signed(&weft, body);
    assert_eq!(signed.0, 202, "{signed:?}");
    let other = weft.drain("signed", 1, Duration::from_secs(30));
    assert_eq!(other.len(), 1, "the other source's message");
    assert_eq!(other[0]["record"]["n"], 7);

    // Once the store takes the write, a restart prunes the log and every
    // message reaches the sink once, in acceptance order, however often
    // the feed restarted meanwhile.
    weft.store_execute("DROP TRIGGER refuse_prune");
    let got = weft.drain("orders", 6, Duration::from_secs(90));
    let ns: Vec<i64> = got
        .iter()
        .map(|m| m["record"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (1..=6).collect::<Vec<_>>(), "each once, in order");
    assert!(weft.receive("orders", 10, 1500).is_empty(), "nothing twice");
    wait_until_pruned(&weft, Duration::from_secs(90));
    let restarted = weft
        .health_check("webhook_source", "orders_in", "feed")
        .expect("the check says the feed restarted");
    assert_eq!(restarted["status"], "warning", "{restarted}");
    let restarts = weft.metric(
        "weft_webhook_source_feed_restarts_total",
        &[("source", "orders_in")],
    );
    assert!(restarts.is_some_and(|n| n >= 1.0), "{restarts:?}");
}
