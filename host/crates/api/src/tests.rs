//! The pull API over real HTTP on a loopback port.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;
use weft_core::lsn::Lsn;
use weft_sinks::delivery::DeliveryWaker;
use weft_sinks::sequin_stream::SequinStreamSettings;
use weft_store::{AckId, NewMessage, SinkBatch};

struct Server {
    base: String,
    state: ApiState,
    sinks: SinkHandles,
    store: Store,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn start(settings: SequinStreamSettings) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    let shutdown = CancellationToken::new();
    let sinks = SinkHandles::new();
    sinks.put_pull(
        "orders",
        SequinStream::new("orders", store.clone(), settings),
    );
    let state = ApiState::new(store.clone(), sinks.clone(), None, shutdown.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(serve(listener, router(state.clone()), shutdown.clone()));
    Server {
        base,
        state,
        sinks,
        store,
        shutdown,
        task,
        client: reqwest::Client::new(),
        _dir: dir,
    }
}

impl Server {
    fn append(&self, lsn: u64, group: &str) {
        let message = NewMessage {
            commit_lsn: Lsn(lsn),
            commit_idx: 0,
            group_id: group.into(),
            idempotency_key: weft_core::message::idempotency_key(Lsn(lsn), 0),
            payload: weft_core::payload::Payload::Json(
                json!({"record": {"id": lsn}, "action": "insert"}),
            )
            .into(),
            route: None,
        };
        let batch = [SinkBatch::of("orders", vec![message])];
        self.store.append(&batch, Lsn(lsn)).unwrap();
        self.state.wake("orders");
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (response.status(), response.json().await.unwrap())
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status(), response.json().await.unwrap())
    }
}

fn ack_ids_of(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["ack_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn health_answers_ok() {
    let server = start(SequinStreamSettings::default()).await;
    assert_eq!(
        server.get("/health").await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
}

#[tokio::test]
async fn api_health_lists_failing_checks_per_entity() {
    use weft_core::health::{EntityKind, Status};
    let server = start(SequinStreamSettings::default()).await;
    weft_core::health::global().fail(
        EntityKind::Sink,
        "api-health-test-sink",
        "probe",
        Status::Warning,
        "something to look at".into(),
    );
    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK);
    let entity = body["entities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "api-health-test-sink")
        .expect("the sink is listed")
        .clone();
    assert_eq!(entity["kind"], "sink");
    assert_eq!(entity["status"], "warning");
    assert_eq!(entity["checks"][0]["id"], "probe");
    assert_eq!(entity["checks"][0]["message"], "something to look at");
    assert_ne!(body["status"], "healthy");
}

#[tokio::test]
async fn receive_ack_and_nack_under_both_prefixes() {
    let server = start(SequinStreamSettings::default()).await;
    server.append(10, "a");
    server.append(11, "b");
    server.append(12, "a");

    let (status, body) = server
        .get("/api/http_pull_consumers/orders/receive?batch_size=10")
        .await;
    assert_eq!(status, StatusCode::OK);
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "one message per group: {body}");
    assert_eq!(
        data[0]["data"],
        json!({"record": {"id": 10}, "action": "insert"})
    );
    assert_eq!(data[1]["data"]["record"]["id"], 11);
    let ids = ack_ids_of(&body);
    assert!(ids.iter().all(|id| id.parse::<AckId>().is_ok()));

    // Nack b through the other prefix: it comes straight back.
    let (status, body) = server
        .post(
            "/api/sequin_streams/orders/nack",
            json!({"ack_ids": [ids[1]]}),
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"success": true})));
    let (_, again) = server
        .post(
            "/api/sequin_streams/orders/receive",
            json!({"batch_size": 10}),
        )
        .await;
    assert_eq!(again["data"][0]["data"]["record"]["id"], 11);

    // Ack a's head: a's next message becomes receivable.
    let (status, body) = server
        .post(
            "/api/sequin_streams/orders/ack",
            json!({"ack_ids": [ids[0]]}),
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"success": true})));
    // The consumer id from the messages' metadata names the sink too.
    let id = weft_core::message::ConsumerRef::for_sink("orders").id;
    let (_, next) = server
        .get(&format!(
            "/api/sequin_streams/{id}/receive?max_batch_size=10"
        ))
        .await;
    assert_eq!(next["data"].as_array().unwrap().len(), 1);
    assert_eq!(next["data"][0]["data"]["record"]["id"], 12);
    assert_eq!(server.store.message_counts("orders").unwrap().stored, 2);
}

#[tokio::test]
async fn long_poll_returns_as_soon_as_a_message_is_appended() {
    let server = start(SequinStreamSettings::default()).await;
    let started = Instant::now();
    let poll = server
        .client
        .get(format!(
            "{}/api/sequin_streams/orders/receive?wait_for=20000",
            server.base
        ))
        .send();
    let (response, ()) = tokio::join!(poll, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.append(10, "a");
    });
    let body: Value = response.unwrap().json().await.unwrap();
    assert_eq!(body["data"].as_array().unwrap().len(), 1, "{body}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // With nothing to hand out it answers empty after wait_for.
    let started = Instant::now();
    let (status, body) = server
        .get("/api/sequin_streams/orders/receive?wait_for=600")
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"data": []})));
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[tokio::test]
async fn bad_parameters_are_400_naming_the_parameter_and_range() {
    let server = start(SequinStreamSettings::default()).await;
    let (status, body) = server
        .get("/api/sequin_streams/orders/receive?batch_size=0")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let summary = body["summary"].as_str().unwrap();
    assert!(
        summary.contains("batch_size") && summary.contains("between 1 and 1000"),
        "{body}"
    );
    assert!(body["validation_errors"]["batch_size"].is_array(), "{body}");

    let (status, body) = server
        .post(
            "/api/http_pull_consumers/orders/receive",
            json!({"wait_for": "1s", "batch_size": 5000}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["validation_errors"]["batch_size"].is_array(), "{body}");

    let (status, body) = server
        .get("/api/sequin_streams/orders/receive?wait_for=100")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["summary"]
            .as_str()
            .unwrap()
            .contains("between 500 and 300000"),
        "{body}"
    );

    let (status, body) = server
        .post("/api/sequin_streams/orders/ack", json!({"ack_ids": ["x"]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["validation_errors"]["ack_ids"][0]
            .as_str()
            .unwrap()
            .contains("\"x\""),
        "{body}"
    );

    let (status, body) = server
        .post("/api/sequin_streams/orders/nack", json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["summary"].as_str().unwrap().contains("ack_ids"),
        "{body}"
    );
}

#[tokio::test]
async fn unknown_sink_is_404_naming_it() {
    let server = start(SequinStreamSettings::default()).await;
    for path in [
        "/api/sequin_streams/nope/receive",
        "/api/http_pull_consumers/nope/receive",
    ] {
        let (status, body) = server.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body["summary"].as_str().unwrap().contains("\"nope\""),
            "{body}"
        );
    }
    let (status, _) = server
        .post("/api/sequin_streams/nope/ack", json!({"ack_ids": []}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = server.get("/api/elsewhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["summary"].as_str().unwrap().contains("/api/elsewhere"),
        "{body}"
    );
}

#[tokio::test]
async fn unknown_ack_ids_are_422_after_the_valid_ones_are_acked() {
    let server = start(SequinStreamSettings::default()).await;
    server.append(10, "a");
    let (_, body) = server.get("/api/sequin_streams/orders/receive").await;
    let ids = ack_ids_of(&body);
    let stranger = AckId::new().to_string();
    let (status, body) = server
        .post(
            "/api/sequin_streams/orders/ack",
            json!({"ack_ids": [ids[0], stranger]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["unknown_ack_ids"], json!([stranger]));
    assert_eq!(body["processed"], 1);
    assert!(
        body["validation_errors"]["ack_ids"][0]
            .as_str()
            .unwrap()
            .contains(&stranger)
    );
    assert_eq!(server.store.message_counts("orders").unwrap().stored, 0);
}

#[tokio::test]
async fn receives_beyond_max_waiting_are_429() {
    let settings = SequinStreamSettings {
        max_waiting: 1,
        ..Default::default()
    };
    let server = start(settings).await;
    let waiting = server
        .client
        .get(format!(
            "{}/api/sequin_streams/orders/receive?wait_for=3000",
            server.base
        ))
        .send();
    let (first, ()) = tokio::join!(waiting, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let response = server
            .client
            .get(format!("{}/api/sequin_streams/orders/receive", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["summary"]
                .as_str()
                .unwrap()
                .contains("max_waiting = 1"),
            "{body}"
        );
        server.append(10, "a");
    });
    assert_eq!(first.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn shutdown_ends_long_polls_and_the_server_promptly() {
    let server = start(SequinStreamSettings::default()).await;
    let poll = server
        .client
        .get(format!(
            "{}/api/sequin_streams/orders/receive?wait_for=60000",
            server.base
        ))
        .send();
    let started = Instant::now();
    let (response, ()) = tokio::join!(poll, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.shutdown.cancel();
    });
    let body: Value = response.unwrap().json().await.unwrap();
    assert_eq!(body, json!({"data": []}));
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Receive+ack throughput over HTTP with 20k stored messages. Run with
/// `--ignored --nocapture` to see the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn receive_and_ack_rate_over_http() {
    let server = start(SequinStreamSettings::default()).await;
    let messages: Vec<NewMessage> = (0..20_000u32)
        .map(|n| NewMessage {
            commit_lsn: Lsn(u64::from(n / 10) + 1),
            commit_idx: n % 10,
            group_id: format!("g{}", n % 1000),
            idempotency_key: weft_core::message::idempotency_key(
                Lsn(u64::from(n / 10) + 1),
                n % 10,
            ),
            payload: weft_core::payload::Payload::Json(
                json!({"record": {"id": n, "name": "x".repeat(200)}, "action": "insert"}),
            )
            .into(),
            route: None,
        })
        .collect();
    let batch = [SinkBatch::of("orders", messages)];
    server.store.append(&batch, Lsn(2001)).unwrap();
    let started = Instant::now();
    let mut received = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let (_, body) = server
            .get("/api/sequin_streams/orders/receive?batch_size=100")
            .await;
        let ids = ack_ids_of(&body);
        assert_eq!(ids.len(), 100);
        received += ids.len();
        let (status, _) = server
            .post("/api/sequin_streams/orders/ack", json!({ "ack_ids": ids }))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    println!(
        "HTTP receive+ack batch 100: {:.0} msg/s",
        received as f64 / started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn dead_letters_are_listed_paged_replayed_and_discarded() {
    let server = start(SequinStreamSettings::default()).await;
    server
        .sinks
        .put_push("hook", DeliveryWaker::new(), PauseSwitch::new(false));
    let messages = (1..=3)
        .map(|i| NewMessage {
            commit_lsn: Lsn(i),
            commit_idx: 0,
            group_id: format!("g{i}"),
            idempotency_key: weft_core::message::idempotency_key(Lsn(i), 0),
            payload: weft_core::payload::Payload::Json(json!({"record": {"id": i}})).into(),
            route: None,
        })
        .collect();
    let batch = [SinkBatch::of("hook", messages)];
    server.store.append(&batch, Lsn(3)).unwrap();
    for leased in server
        .store
        .lease_deliverable("hook", 10, Duration::from_secs(30))
        .unwrap()
    {
        assert!(
            server
                .store
                .dead_letter("hook", leased.ack_id, "HTTP 500")
                .unwrap()
        );
    }

    let (status, page) = server.get("/api/sinks/hook/dead_letters?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["count"], 3);
    let ids: Vec<i64> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(page["data"][0]["message"]["record"]["id"], 1);
    assert_eq!(page["data"][0]["last_error"], "HTTP 500");
    assert_eq!(page["data"][0]["attempts"], 1);
    let (_, rest) = server
        .get(&format!("/api/sinks/hook/dead_letters?after={}", ids[1]))
        .await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    let third = rest["data"][0]["id"].as_i64().unwrap();

    let (status, body) = server.get("/api/sinks/hook/dead_letters?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["validation_errors"]["limit"].is_array(), "{body}");
    let (status, body) = server.get("/api/sinks/hook/dead_letters/abc").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["validation_errors"]["id"].is_array(), "{body}");
    let (status, _) = server.get("/api/sinks/hook/dead_letters/99999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = server
        .post(
            "/api/sinks/hook/dead_letters/replay",
            json!({"ids": [ids[0], 99999]}),
        )
        .await;
    assert_eq!(
        (status, &body["replayed"]),
        (StatusCode::OK, &json!([ids[0]]))
    );
    let (status, body) = server
        .post("/api/sinks/hook/dead_letters/replay", json!({"ids": "all"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let delete = |id: i64| {
        server
            .client
            .delete(format!("{}/api/sinks/hook/dead_letters/{id}", server.base))
            .send()
    };
    assert_eq!(delete(third).await.unwrap().status(), StatusCode::OK);
    assert_eq!(delete(third).await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(server.store.dead_letter_count("hook").unwrap(), 1);
    assert_eq!(server.store.message_counts("hook").unwrap().stored, 1);
    let replayed = server
        .store
        .lease_deliverable("hook", 10, Duration::from_secs(30))
        .unwrap();
    assert_eq!(
        replayed[0].payload.to_payload().unwrap().into_json_view()["record"]["id"],
        1
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn max_deliver_ends_redelivery_in_a_dead_letter_the_api_lists() {
    let server = start(SequinStreamSettings {
        max_deliver: Some(1),
        ..Default::default()
    })
    .await;
    server.append(10, "a");
    server.append(11, "a");
    let (_, body) = server.get("/api/sequin_streams/orders/receive").await;
    let first = ack_ids_of(&body);
    assert_eq!(body["data"][0]["data"]["record"]["id"], 10);
    // A nack makes it visible again, but it has had its one delivery.
    let (status, _) = server
        .post("/api/sequin_streams/orders/nack", json!({"ack_ids": first}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = server.get("/api/sequin_streams/orders/receive").await;
    assert_eq!(body["data"][0]["data"]["record"]["id"], 11, "{body}");
    let (status, dead) = server.get("/api/sinks/orders/dead_letters").await;
    assert_eq!(status, StatusCode::OK);
    let text = dead.to_string();
    assert!(text.contains("max_deliver = 1"), "{text}");
}
