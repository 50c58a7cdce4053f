//! The chain and the routing/enrichment bindings against the real wasmtime
//! and real guest components (`host/tests/guests/`).

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use weft_core::change::Action;
use weft_core::lsn::Lsn;
use weft_wasm::test_support::{config, engine, guest, message};
use weft_wasm::{Grants, Limits, PluginError, SourceQuery};

fn row(record: Value) -> Message {
    message(Action::Insert, record, None)
}

/// A source query against a port nothing listens on: every query fails
/// with a connection error, which is all these tests need.
fn unreachable_source_query(runtime: &tokio::runtime::Runtime) -> SourceQuery {
    let mut pg = tokio_postgres::Config::new();
    pg.host("127.0.0.1")
        .port(1)
        .user("nobody")
        .dbname("none")
        .connect_timeout(Duration::from_secs(2));
    SourceQuery::new(
        "names",
        pg,
        Duration::from_millis(500),
        runtime.handle().clone(),
    )
}

fn routing(keys: &str) -> Named<RoutingFunction> {
    let loaded = engine()
        .load_routing(
            "route",
            &guest("weft-table-routing"),
            &config(&[("keys", keys)]),
            &Limits::default(),
        )
        .expect("load routing guest");
    Named::new("route", loaded)
}

#[test]
fn chain_runs_enrichment_filter_transform_routing_with_one_outcome_per_change() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let enrichment = engine()
        .load_enrichment(
            "names",
            &guest("weft-customer-enrichment"),
            &config(&[]),
            &Limits::default(),
            Grants {
                source_query: Some(unreachable_source_query(&runtime)),
                ..Grants::default()
            },
        )
        .expect("a granted enrichment loads");
    let filter = engine()
        .load_filter(
            "even",
            &guest("weft-even-id-filter"),
            &config(&[]),
            &Limits::default(),
        )
        .unwrap();
    let transform = engine()
        .load_transform(
            "upcase",
            &guest("weft-upcase-transform"),
            &config(&[("column", "name")]),
            &Limits::default(),
        )
        .unwrap();
    let chain = FunctionChain {
        enrichment: Some(Named::new("names", enrichment)),
        filter: Some(Named::new("even", filter)),
        transform: Some(Named::new("upcase", transform)),
        routing: Some(routing("topic,message_key")),
        sink_type: "kafka",
        ..FunctionChain::default()
    };
    let outcomes = chain
        .run_blocking(vec![
            row(json!({"id": 1, "name": "odd"})),
            row(json!({"id": 2, "name": "ada"})),
            row(json!({"id": 4, "name": "bob", "customer_id": 7})),
            row(json!({"id": 6, "name": "cy"})),
        ])
        .expect("no whole-call failure");
    assert_eq!(outcomes.len(), 4);
    assert_eq!(
        outcomes[0],
        ChainOutcome::Dropped {
            filter: "even".into()
        }
    );
    let ChainOutcome::Message(kept) = &outcomes[1] else {
        panic!("expected a message, got {:?}", outcomes[1]);
    };
    let Payload::Json(payload) = &*kept.payload() else {
        panic!("JSON payload expected");
    };
    assert_eq!(payload["record"]["name"], "ADA", "transformed");
    assert_eq!(
        payload["metadata"].get("enrichment"),
        None,
        "no customer_id, no enrichment"
    );
    assert_eq!(
        kept.route.as_ref().unwrap().topic.as_deref(),
        Some("public.users")
    );
    assert_eq!(
        kept.route.as_ref().unwrap().message_key.as_deref(),
        Some("1")
    );
    match &outcomes[2] {
        ChainOutcome::Failed {
            function,
            kind,
            error,
            transient,
            trapped: false,
        } => {
            assert_eq!(
                (function.as_str(), *kind, *transient),
                ("names", "enrichment", true)
            );
            assert!(
                error.contains("cannot connect to the source database"),
                "{error}"
            );
        }
        other => panic!("expected the enrichment to fail on row 4, got {other:?}"),
    }
    assert!(
        matches!(&outcomes[3], ChainOutcome::Message(m) if m.message.record.to_map()["id"] == 6)
    );
}

#[test]
fn without_functions_the_payload_is_the_message() {
    let chain = FunctionChain {
        sink_type: "sequin_stream",
        ..FunctionChain::default()
    };
    let input = row(json!({"id": 1}));
    let outcomes = chain.run_blocking(vec![input.clone()]).unwrap();
    let ChainOutcome::Message(message) = &outcomes[0] else {
        panic!("a message, got {outcomes:?}");
    };
    assert_eq!(
        *message.payload(),
        Payload::Json(serde_json::to_value(&input).unwrap())
    );
    assert_eq!(
        outcomes,
        vec![ChainOutcome::Message(Box::new(ChainMessage {
            payload: None,
            message: input,
            route: None,
        }))],
        "rendered once, when stored"
    );
}

#[test]
fn routes_are_validated_against_the_sink_type() {
    let chain = FunctionChain {
        routing: Some(routing("topic,subject")),
        sink_type: "nats",
        ..FunctionChain::default()
    };
    let outcomes = chain.run_blocking(vec![row(json!({"id": 1}))]).unwrap();
    assert_eq!(
        outcomes,
        vec![ChainOutcome::Failed {
            function: "route".into(),
            kind: "routing",
            error: "a nats sink does not use the routing key `topic`; allowed keys: `subject`, `headers`"
                .into(),
            transient: false,
            trapped: false,
        }]
    );

    let chain = FunctionChain {
        routing: Some(routing("method,bad_endpoint_path")),
        sink_type: "webhook",
        ..FunctionChain::default()
    };
    let outcomes = chain.run_blocking(vec![row(json!({"id": 1}))]).unwrap();
    assert!(
        matches!(&outcomes[0], ChainOutcome::Failed { error, .. }
            if error == "routing key `endpoint_path`: \"users\" must start with `/`"),
        "{outcomes:?}"
    );

    let chain = FunctionChain {
        routing: Some(routing("method,endpoint_path,headers")),
        sink_type: "webhook",
        ..FunctionChain::default()
    };
    let outcomes = chain.run_blocking(vec![row(json!({"id": 1}))]).unwrap();
    let ChainOutcome::Message(routed) = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    let route = routed.route.as_ref().unwrap();
    assert_eq!(route.endpoint_path.as_deref(), Some("/users/1"));
    assert_eq!(
        serde_json::to_value(route).unwrap(),
        json!({"headers": [["X-Table", "public.users"]], "method": "PUT", "endpoint_path": "/users/1"})
    );
}

#[test]
fn an_enrichment_importing_an_ungranted_capability_is_refused_at_load() {
    let error = engine()
        .load_enrichment(
            "names",
            &guest("weft-customer-enrichment"),
            &config(&[]),
            &Limits::default(),
            Grants::default(),
        )
        .unwrap_err();
    match &error {
        PluginError::Ungranted { imports, .. } => {
            assert_eq!(imports, &["weft:plugin/source-query@0.2.0".to_string()])
        }
        other => panic!("expected Ungranted, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("imports capabilities it is not granted: `weft:plugin/source-query@0.2.0`")
            && text.contains("grants: {source_query: true}"),
        "{text}"
    );
}

fn probe(limits: &Limits) -> TransformFunction {
    engine()
        .load_transform(
            "probe",
            &guest("weft-probe-transform"),
            &config(&[]),
            limits,
        )
        .expect("load probe guest")
}

fn probe_output(function: &mut TransformFunction, batch: &[Message]) -> Vec<Value> {
    function
        .transform(batch)
        .unwrap()
        .into_iter()
        .map(|outcome| match outcome {
            Ok(Payload::Json(value)) => value,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn deterministic_mode_gives_identical_clocks_and_random_on_replay() {
    let deterministic = Limits {
        deterministic: true,
        ..Limits::default()
    };
    let batch = vec![row(json!({"id": 1})), row(json!({"id": 2}))];
    let first = probe_output(&mut probe(&deterministic), &batch);
    let replay = probe_output(&mut probe(&deterministic), &batch);
    assert_eq!(first, replay, "a fresh instance replays identically");
    // The wall clock starts at the commit timestamp 2024-05-01T12:00:00.123456Z.
    let commit_us = 1_714_564_800_123_456u64;
    let wall = first[0]["wall_us"].as_u64().unwrap();
    assert!(
        (commit_us..commit_us + 1000).contains(&wall),
        "wall clock {wall}"
    );
    assert_ne!(
        first[0]["random"], first[1]["random"],
        "random still varies within a call"
    );

    // Another change (another LSN) gets other random inputs.
    let mut later = row(json!({"id": 1}));
    later.metadata.commit_lsn = Lsn(999_999);
    let other = probe_output(&mut probe(&deterministic), &[later]);
    assert_ne!(other[0]["random"], first[0]["random"]);

    // Without deterministic mode, two instances draw different random.
    let a = probe_output(&mut probe(&Limits::default()), &batch);
    let b = probe_output(&mut probe(&Limits::default()), &batch);
    assert_ne!(a[0]["random"], b[0]["random"]);
}

#[test]
fn instances_are_recycled_after_n_calls_and_past_the_memory_high_water_mark() {
    let mut by_calls = probe(&Limits {
        recycle_after_calls: Some(2),
        ..Limits::default()
    });
    let one = [row(json!({"id": 1}))];
    let calls: Vec<Value> = (0..5)
        .map(|_| probe_output(&mut by_calls, &one)[0]["calls"].clone())
        .collect();
    assert_eq!(calls, [json!(1), json!(2), json!(1), json!(2), json!(1)]);
    assert_eq!(by_calls.recycled_instances(), 2);

    let mut by_memory = probe(&Limits {
        recycle_memory_bytes: Some(8 << 20),
        ..Limits::default()
    });
    assert_eq!(probe_output(&mut by_memory, &one)[0]["calls"], 1);
    assert_eq!(
        probe_output(&mut by_memory, &one)[0]["calls"],
        2,
        "small heap: kept"
    );
    let hold = [row(json!({"id": 1, "hold_mib": 16}))];
    assert_eq!(probe_output(&mut by_memory, &hold)[0]["calls"], 3);
    assert_eq!(
        by_memory.recycled_instances(),
        1,
        "grew past 8 MiB: recycled"
    );
    assert_eq!(
        probe_output(&mut by_memory, &one)[0]["calls"],
        1,
        "a fresh instance"
    );
}

#[test]
fn a_trapping_batch_is_bisected_so_only_the_poison_changes_fail() {
    let limits = Limits {
        call_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let transform = engine()
        .load_transform(
            "hostile",
            &guest("weft-hostile-transform"),
            &config(&[]),
            &limits,
        )
        .expect("load hostile guest");
    let chain = FunctionChain {
        transform: Some(Named::new("hostile", transform)),
        sink_type: "sequin_stream",
        ..FunctionChain::default()
    };
    let poison = [(17, "panic"), (60, "loop"), (61, "panic")];
    let messages: Vec<Message> = (0..100)
        .map(|id| {
            let behaviour = poison
                .iter()
                .find(|(at, _)| *at == id)
                .map_or("echo", |(_, what)| what);
            row(json!({"id": id, "do": behaviour}))
        })
        .collect();
    let outcomes = chain
        .run_isolating(&messages)
        .expect("isolated, not failed");
    assert_eq!(outcomes.len(), 100);
    for (id, outcome) in outcomes.iter().enumerate() {
        match poison.iter().find(|(at, _)| *at == id) {
            Some((_, what)) => {
                let ChainOutcome::Failed {
                    error,
                    trapped,
                    transient,
                    function,
                    ..
                } = outcome
                else {
                    panic!("change {id} ({what}) should fail, got {outcome:?}");
                };
                assert!(*trapped && !*transient && function == "hostile");
                let expected = if *what == "loop" {
                    "timed out"
                } else {
                    "panicked on purpose"
                };
                assert!(error.contains(expected), "change {id}: {error}");
            }
            None => {
                let ChainOutcome::Message(done) = outcome else {
                    panic!("change {id} should pass, got {outcome:?}");
                };
                assert_eq!(done.message.record.to_map()["id"], id, "order kept");
            }
        }
    }
}

#[test]
fn only_failures_a_change_can_cause_are_bisected() {
    let limits = Limits {
        call_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let failure = PluginError::Instantiate {
        plugin: "p".into(),
        message: "pool exhausted".into(),
    };
    assert!(!failure.is_caused_by_input());
    let timeout = PluginError::Timeout {
        plugin: "p".into(),
        limit: limits.call_timeout,
    };
    assert!(timeout.is_caused_by_input());
    assert_eq!(timeout.reason_label(), "timeout");
}

fn tagger(tag: &str) -> Named<TransformFunction> {
    let loaded = engine()
        .load_transform(
            "tag",
            &guest("weft-tag-transform"),
            &config(&[("tag", tag)]),
            &Limits::default(),
        )
        .expect("load the tag guest");
    Named::new("tag", loaded)
}

fn tag_instance(tag: &str) -> TransformFunction {
    tagger(tag)
        .into_inner()
        .and_then(|instances| instances.into_iter().next())
        .expect("a fresh instance")
}

fn ids(outcomes: &[ChainOutcome]) -> Vec<i64> {
    payload_field(outcomes, "id")
        .iter()
        .map(|id| id.as_i64().unwrap())
        .collect()
}

#[test]
fn two_instances_take_a_batch_by_group_and_keep_its_order() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Instance 0 tags "a", instance 1 "b": the tag tells which one ran.
    let chain = FunctionChain {
        transform: Some(Named::of_instances(
            "tag",
            vec![tag_instance("a"), tag_instance("b")],
        )),
        sink_type: "sequin_stream",
        ..FunctionChain::default()
    };
    assert_eq!(chain.instances(), 2);
    // 300 changes of 100 groups, three per group, interleaved.
    let batch = || {
        (0..300)
            .map(|id| row(json!({"id": id, "name": "a"})))
            .collect::<Vec<_>>()
    };
    let groups: Vec<String> = (0..300).map(|id| format!("g{}", id % 100)).collect();
    let first = runtime
        .block_on(chain.run(batch(), groups.iter().map(String::as_str)))
        .unwrap();
    assert_eq!(
        ids(&first),
        (0..300).collect::<Vec<_>>(),
        "the batch's order"
    );
    let tagged = tags(&first);
    for (id, tag) in tagged.iter().enumerate() {
        assert_eq!(
            tag,
            &tagged[id % 100],
            "change {id}: its group's changes all go to one instance"
        );
    }
    let a = tagged.iter().filter(|t| *t == "a").count();
    assert!(
        a > 60 && a < 240,
        "both instances take a share of the groups: {a} of 300 on the first"
    );
    let second = runtime
        .block_on(chain.run(batch(), groups.iter().map(String::as_str)))
        .unwrap();
    assert_eq!(
        tags(&second),
        tagged,
        "a group goes to the same instance every batch"
    );

    // A small batch is not worth a thread: the first instance takes it.
    let small = runtime
        .block_on(
            chain.run(
                (0..10)
                    .map(|id| row(json!({"id": id, "name": "a"})))
                    .collect(),
                groups.iter().take(10).map(String::as_str),
            ),
        )
        .unwrap();
    assert_eq!(tags(&small), vec!["a"; 10]);
}

fn tags(outcomes: &[ChainOutcome]) -> Vec<String> {
    payload_field(outcomes, "tag")
        .iter()
        .map(|tag| tag.as_str().unwrap().to_string())
        .collect()
}

/// `field` of each outcome's JSON payload; panics on anything else.
fn payload_field(outcomes: &[ChainOutcome], field: &str) -> Vec<Value> {
    outcomes
        .iter()
        .map(|outcome| match outcome {
            ChainOutcome::Message(message) => match &*message.payload() {
                Payload::Json(json) => json[field].clone(),
                other => panic!("a JSON payload, got {other:?}"),
            },
            other => panic!("a message, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_swap_replaces_the_named_functions_from_the_next_run_and_records_its_first_change() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let chain = FunctionChain {
        transform: Some(tagger("v1")),
        routing: Some(routing("topic")),
        sink_type: "kafka",
        ..FunctionChain::default()
    };
    let batch = |first: i64| {
        (first..first + 2)
            .map(|id| {
                let mut message = row(json!({"id": id, "name": "a"}));
                message.metadata.record_pks = vec![id.to_string()];
                message
            })
            .collect::<Vec<_>>()
    };
    let before = runtime
        .block_on(chain.run(batch(1), std::iter::empty()))
        .unwrap();
    assert_eq!(tags(&before), ["v1", "v1"]);

    let fresh = FunctionChain {
        transform: Some(tagger("v2")),
        routing: Some(routing("topic")),
        sink_type: "kafka",
        ..FunctionChain::default()
    };
    chain.swap_in(
        fresh,
        &["tag".to_string()],
        vec![SwitchPoint {
            function: "tag".into(),
            to: "tagger@2".into(),
            swapped_at: 1,
            first_change: None,
        }],
    );
    assert_eq!(chain.swaps.switches()[0].first_change, None);
    let after = runtime
        .block_on(chain.run(batch(3), std::iter::empty()))
        .unwrap();
    assert_eq!(
        tags(&after),
        ["v2", "v2"],
        "the next run uses the new version"
    );
    let switches = chain.swaps.switches();
    assert_eq!(switches.len(), 1);
    let first = switches[0].first_change.as_ref().expect("recorded");
    assert_eq!(first.record_pks, ["3"], "the first change after the swap");
    runtime
        .block_on(chain.run(batch(5), std::iter::empty()))
        .unwrap();
    assert_eq!(
        chain.swaps.switches()[0]
            .first_change
            .as_ref()
            .unwrap()
            .record_pks,
        ["3"],
        "later runs leave the switch point alone"
    );
}
