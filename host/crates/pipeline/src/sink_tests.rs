//! What a sink does with changes its functions fail on, against a real
//! store and the real hostile guest.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use weft_core::change::{Action, Column, Relation, Row};
use weft_sinks::config::Config;
use weft_wasm::Limits;
use weft_wasm::test_support::{config, engine, guest};

/// What `sink` makes of `changes`, with no run of its held changes under way.
async fn process(sink: &mut SinkPipeline, changes: Vec<Change>, store: &Store) -> SinkBatch {
    process_behind(sink, changes, store, false).await
}

/// What `sink` makes of `changes`, `behind_a_run` of its held changes or not.
async fn process_behind(
    sink: &mut SinkPipeline,
    changes: Vec<Change>,
    store: &Store,
    behind_a_run: bool,
) -> SinkBatch {
    let mut prepared = sink.prepare(changes);
    sink.process(&mut prepared, store, behind_a_run)
        .await
        .unwrap()
}

/// Runs `sink`'s due held changes (up to `limit`) as the pipeline does,
/// one run after the other, and stores the outcome; how many were settled.
async fn release_held(sink: &mut SinkPipeline, store: &Store, limit: u32) -> usize {
    let due = sink.due_held(store, limit).await.unwrap();
    if due.is_empty() {
        return 0;
    }
    let run = sink.held_run(due).await.unwrap();
    sink.settle_held_run(run, store).await.unwrap()
}

fn relation() -> Arc<Relation> {
    Arc::new(Relation {
        oid: 1,
        schema: "public".into(),
        name: "items".into(),
        columns: ["id", "do"]
            .iter()
            .map(|name| Column {
                name: (*name).into(),
                type_oid: 25,
                type_modifier: -1,
                is_identity_key: *name == "id",
            })
            .collect(),
        primary_key: vec!["id".into()],
    })
}

fn change(lsn: u64, idx: u32, id: i64, what: &str) -> Change {
    let Value::Object(new) = json!({"id": id, "do": what}) else {
        unreachable!()
    };
    Change {
        relation: relation(),
        action: Action::Insert,
        commit_lsn: Lsn(lsn),
        commit_idx: idx,
        xid: 1,
        commit_timestamp: chrono::Utc::now(),
        new: Some(Row::from(new)),
        old: None,
        backfill: None,
        webhook: None,
    }
}

/// The `extra` of [`sink`] for a pull (Sequin Stream) sink.
const PULL: &str = "    destination: {type: sequin_stream}\n";

/// A sink `s` with `extra` sink YAML, running the hostile transform when
/// `hostile`, else no function.
fn sink(dir: &std::path::Path, extra: &str, hostile: bool) -> SinkPipeline {
    let text = format!(
        "databases:
  - {{name: db, hostname: h, database: d, slot: {{name: s}}, publication: {{name: p}}}}
http_endpoints:
  - {{name: hooks, url: 'http://127.0.0.1:1/'}}
sinks:
  - name: s
    database: db
{extra}"
    );
    let sink_config = Config::from_yaml(&text, dir, &|_| None).unwrap().sinks[0].clone();
    let mut chain = FunctionChain {
        sink_type: sink_config.destination.type_name(),
        ..FunctionChain::default()
    };
    if hostile {
        let transform = engine()
            .load_transform(
                "hostile",
                &guest("weft-hostile-transform"),
                &config(&[]),
                &Limits::default(),
            )
            .unwrap();
        chain.transform = Some(super::super::Named::new("hostile", transform));
    }
    SinkPipeline::new(sink_config, chain)
}

fn stored_ids(store: &Store) -> Vec<(u64, Value)> {
    let mut got = Vec::new();
    loop {
        let batch = store
            .lease_deliverable("s", 100, Duration::from_secs(30))
            .unwrap();
        if batch.is_empty() {
            return got;
        }
        for message in &batch {
            let Payload::Json(payload) = message.payload.to_payload().unwrap() else {
                panic!("JSON expected")
            };
            let id = payload.get("record").map_or(&payload["id"], |r| &r["id"]);
            got.push((message.commit_lsn.0, id.clone()));
        }
        let acks: Vec<_> = batch.iter().map(|m| m.ack_id).collect();
        store.ack("s", &acks).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_holds_its_group_and_releases_it_in_order_when_due() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    let mut failing = sink(dir.path(), PULL, true);
    let first = change(10, 0, 1, "retry");
    let other = change(10, 1, 2, "echo");
    let later = change(20, 0, 1, "echo");
    let batch = process(&mut failing, vec![first, other, later], &store).await;
    assert_eq!(batch.messages.len(), 1, "the other group goes on");
    assert_eq!(batch.holds.len(), 2, "{:?}", batch.holds);
    let retry = batch.holds[0].clone();
    assert_eq!(retry.change.commit_lsn, Lsn(10));
    assert_eq!(retry.change.attempts, 1);
    assert!(
        retry
            .change
            .last_error
            .as_deref()
            .unwrap()
            .contains("try later"),
        "{retry:?}"
    );
    assert!(
        retry.retry_in >= Duration::from_millis(500),
        "default backoff from 1 s"
    );
    assert_eq!(batch.holds[1].change.commit_lsn, Lsn(20), "held behind it");
    store.append(&[batch], Lsn(20)).unwrap();
    assert_eq!(stored_ids(&store), vec![(10, json!(2))]);

    // A new change of the held group waits too.
    let newest = change(30, 0, 1, "echo");
    let batch = process(&mut failing, vec![newest], &store).await;
    assert!(batch.messages.is_empty());
    assert_eq!(batch.holds.len(), 1);
    store.append(&[batch], Lsn(30)).unwrap();
    assert_eq!(
        release_held(&mut failing, &store, 100).await,
        0,
        "not due yet"
    );

    // Due, with a function that no longer fails: the group goes through in order.
    let mut fixed = sink(dir.path(), PULL, false);
    tokio::time::sleep(retry.retry_in + Duration::from_millis(50)).await;
    assert_eq!(release_held(&mut fixed, &store, 100).await, 3);
    assert_eq!(
        stored_ids(&store),
        vec![(10, json!(1)), (20, json!(1)), (30, json!(1))]
    );
    assert_eq!(store.held_count("s").unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_retry_count_a_transient_failure_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    let mut failing = sink(
        dir.path(),
        "    max_retry_count: 0\n    destination: {type: webhook, http_endpoint: hooks}\n",
        true,
    );
    let first = change(10, 0, 1, "retry");
    let permanent = change(10, 1, 2, "fail");
    let batch = process(&mut failing, vec![first, permanent], &store).await;
    assert!(batch.holds.is_empty() && batch.messages.is_empty());
    assert_eq!(batch.dead_letters.len(), 2);
    assert!(batch.dead_letters[0].error.contains("try later"));
    assert!(batch.dead_letters[1].error.contains("bad row"));
    store.append(&[batch], Lsn(10)).unwrap();
    let letters = store.dead_letters("s", 0, 10).unwrap();
    assert_eq!(letters.len(), 2);
    assert_eq!(letters[0].stage, weft_store::FailedStage::Functions);
    let Payload::Json(message) = &letters[0].payload else {
        panic!("the message JSON is kept")
    };
    assert_eq!(message["record"]["do"], "retry");

    // A replay holds it for the functions again.
    store.replay_dead_letters("s", None).unwrap();
    assert_eq!(store.held_count("s").unwrap(), 2);
    let mut fixed = sink(
        dir.path(),
        "    destination: {type: webhook, http_endpoint: hooks}\n",
        false,
    );
    assert_eq!(release_held(&mut fixed, &store, 100).await, 2);
    assert_eq!(stored_ids(&store), vec![(10, json!(1)), (10, json!(2))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_a_function_traps_on_is_held_whole_and_a_held_run_bisects_it_then_pauses() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    let mut sink = sink(dir.path(), PULL, true);
    let batch = process(&mut sink, vec![change(10, 0, 1, "echo")], &store).await;
    assert_eq!(batch.messages.len(), 1, "a clean batch goes through");
    assert!(batch.holds.is_empty() && batch.dead_letters.is_empty());
    store.append(&[batch], Lsn(10)).unwrap();

    // On the feed: one call, which fails, and the whole batch is held.
    let clean = change(20, 0, 2, "echo");
    let poison = change(20, 1, 3, "panic");
    let batch = process(&mut sink, vec![clean, poison], &store).await;
    assert!(batch.messages.is_empty() && batch.dead_letters.is_empty());
    assert_eq!(batch.holds.len(), 2, "{:?}", batch.holds);
    for hold in &batch.holds {
        assert_eq!(hold.retry_in, Duration::ZERO, "due at once");
        assert_eq!(hold.change.attempts, 0, "the whole call is no attempt");
        assert!(
            hold.change
                .last_error
                .as_deref()
                .unwrap()
                .contains("panicked"),
            "{hold:?}"
        );
    }
    store.append(&[batch], Lsn(20)).unwrap();

    // While a run of held changes is under way, new changes wait behind it.
    let batch = process_behind(&mut sink, vec![change(30, 0, 4, "echo")], &store, true).await;
    assert!(batch.messages.is_empty());
    assert_eq!(batch.holds.len(), 1);
    store.append(&[batch], Lsn(30)).unwrap();

    // The run bisects: the poison is dead-lettered, the others go through
    // in order, and a run with a trap pauses for twice its length.
    let due = sink.due_held(&store, 100).await.unwrap();
    assert_eq!(due.len(), 3);
    let started = std::time::Instant::now();
    let run = sink.held_run(due).await.unwrap();
    let took = started.elapsed();
    assert_eq!(sink.settle_held_run(run, &store).await.unwrap(), 3);
    assert_eq!(
        stored_ids(&store),
        vec![(10, json!(1)), (20, json!(2)), (30, json!(4))]
    );
    assert_eq!(store.held_count("s").unwrap(), 0);
    let letters = store.dead_letters("s", 0, 10).unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");

    // A run without a trap does not pause.
    let batch = process_behind(&mut sink, vec![change(40, 0, 5, "echo")], &store, true).await;
    store.append(&[batch], Lsn(40)).unwrap();
    let due = sink.due_held(&store, 100).await.unwrap();
    let started = std::time::Instant::now();
    let run = sink.held_run(due).await.unwrap();
    let quick = started.elapsed();
    assert!(
        quick * 3 < took,
        "a clean run ({quick:?}) pauses for nothing, a trapping one ({took:?}) for twice its length"
    );
    assert_eq!(sink.settle_held_run(run, &store).await.unwrap(), 1);
}

#[test]
fn a_group_is_the_table_and_the_key_values_joined_by_colons() {
    let dir = tempfile::tempdir().unwrap();
    let sink = sink(dir.path(), PULL, false);
    let mut prepared = sink.prepare(vec![change(10, 0, 7, "a")]);
    sink.make_messages(&mut prepared);
    assert_eq!(prepared.pending[0].group_id, "public.items:7");
    let mut message = prepared.pending[0].message.clone();
    message.metadata.record_pks = vec!["1".into(), "x:y".into()];
    assert_eq!(group_id(&message), "public.items:1:x:y");
    message.metadata.record_pks.clear();
    assert_eq!(group_id(&message), "public.items:");
}

#[test]
fn payloads_render_whole_and_keep_little_slack_whatever_size_came_before() {
    let big = json!({"text": "x".repeat(200_000)});
    let small = json!({"id": 1});
    for value in [&small, &big, &small, &big] {
        let StoredPayload::Json(text) = StoredPayload::json_of(value) else {
            panic!("JSON expected")
        };
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), *value);
        assert!(
            text.capacity() - text.len() <= 4096,
            "a {}-byte payload keeps {} bytes it does not use",
            text.len(),
            text.capacity() - text.len()
        );
    }
}

/// A backfill's read of row `id`, its record written as JSON.
fn read(idx: u32, id: i64, what: &str) -> Change {
    Change {
        action: Action::Read,
        new: None,
        backfill: Some(weft_core::change::BackfillRead {
            tag: Arc::new(weft_core::change::BackfillTag {
                id: "b".into(),
                sink: "s".into(),
            }),
            key: vec![id.to_string()],
            record: json!({"id": id, "do": what}).to_string().into(),
        }),
        ..change(30, idx, id, what)
    }
}

#[test]
fn column_filters_read_a_backfills_written_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = sink(dir.path(), PULL, false);
    sink.config.column_filters = vec![
        serde_json::from_value(
            json!({"column_name": "do", "operator": "=", "comparison_value": "keep"}),
        )
        .unwrap(),
    ];
    assert!(sink.accepts(&read(1, 1, "keep")));
    assert!(!sink.accepts(&read(2, 2, "drop")));
    assert!(sink.accepts(&change(30, 3, 3, "keep")), "as changes are");
    let other_sink = Change {
        backfill: read(4, 4, "keep").backfill.map(|mut read| {
            read.tag = Arc::new(weft_core::change::BackfillTag {
                id: "b".into(),
                sink: "elsewhere".into(),
            });
            read
        }),
        ..read(4, 4, "keep")
    };
    assert!(!sink.accepts(&other_sink), "another sink's backfill");
}

#[test]
fn a_read_becomes_a_message_with_its_written_record_and_its_backfill_key() {
    let dir = tempfile::tempdir().unwrap();
    let sink = sink(dir.path(), PULL, false);
    let mut prepared = sink.prepare(vec![read(1, 7, "x")]);
    sink.make_messages(&mut prepared);
    let pending = prepared.pending;
    let message = &pending[0].message;
    assert!(
        matches!(&message.record, weft_core::message::Record::Json(json) if &**json == r#"{"id":7,"do":"x"}"#)
    );
    assert_eq!(message.metadata.record_pks, vec!["7".to_string()]);
    assert_eq!(
        message.metadata.idempotency_key,
        weft_core::message::backfill_idempotency_key("b", &["7".to_string()])
    );
    assert_eq!(pending[0].group_id, "public.items:7");
    let mut out = String::new();
    json::write_message(&mut out, message, &mut Default::default());
    let written: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(written["record"], json!({"id": 7, "do": "x"}));
    assert_eq!(written, serde_json::to_value(message).unwrap());
}
