//! The checks every sink type passes, and the driver that runs a sink type
//! the way `weft run` does: its `destination:` read from a config, its
//! delivery built through its `Sink` implementation, and its messages
//! delivered from a real store by the real delivery worker (a pull sink's
//! by its consumer), against the real service its [`Fixture`] starts.
//!
//! The checks:
//! - [`order_per_group`]: each group's messages arrive in commit order;
//! - [`route_override`]: a routing function's keys send a message where
//!   they say, the sink's defaults send the rest;
//! - [`bytes_exact`]: a transform's bytes payload arrives byte-exact;
//! - [`retriable_and_permanent`]: a failure no retry can fix dead-letters
//!   its message at once, while a failure a retry can fix (the service
//!   down) keeps the message until it is delivered;
//! - [`outage_loses_nothing`]: the service going away and coming back
//!   loses no message and reorders none.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::harness::wait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use weft_core::change::Action;
use weft_core::lsn::Lsn;
use weft_core::message::{ConsumerRef, Message, Metadata, idempotency_key};
use weft_core::payload::Payload;
use weft_core::route::Route;
use weft_sinks::config::Config;
use weft_sinks::delivery::{DeliveryWaker, DeliveryWorker};
use weft_sinks::pull::SequinStreamSettings;
use weft_sinks::route;
use weft_sinks::sink::{Built, SinkKind};
use weft_store::{DeadLetter, NewMessage, SinkBatch, Store, StoredPayload};

/// The sink's name in every config the suite writes.
pub const SINK: &str = "conformance";
/// The table every message is a change of.
pub const TABLE: &str = "orders";
/// The content type of the bytes payload.
pub const BYTES_TYPE: &str = "application/x-weft-conformance";

/// Every byte value, twice, none of it UTF-8 as a whole: what a transform's
/// bytes payload must arrive as.
pub fn bytes_payload() -> Vec<u8> {
    (0..=255u8).chain((0..=255u8).rev()).collect()
}

/// How long a check waits for deliveries before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// One message as the service holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The body as delivered.
    pub body: Vec<u8>,
    /// The content type the service kept with it, if it keeps one.
    pub content_type: Option<String>,
    /// Whether it went where [`Fixture::routed`] sends messages.
    pub routed: bool,
}

impl Seen {
    /// `(group, seq)` of a message the suite sent as JSON; `None` for a
    /// bytes payload.
    fn id(&self) -> Option<(String, u64)> {
        let message: Value = serde_json::from_slice(&self.body).ok()?;
        let record = message.get("record")?;
        Some((
            record.get("group")?.as_str()?.to_string(),
            record.get("seq")?.as_u64()?,
        ))
    }
}

/// One sink type under test, and the real service it delivers to.
pub trait Fixture: Sized {
    /// The sink type's `destination.type`.
    const TYPE: &'static str;

    /// Whether consumers pull its messages: the suite gives a push sink
    /// fast retries, and a pull sink no delivery fields.
    const PULLED: bool = false;

    /// Starts the service, owned by the test.
    fn start() -> Self;

    /// The sink's `destination:` settings but `type`, each line indented
    /// eight spaces.
    fn destination(&self) -> String;

    /// `databases:` entries the destination names (each line a list item
    /// indented two spaces), beside the suite's own source entry.
    fn databases(&self) -> String {
        String::new()
    }

    /// Other top-level sections the destination needs (`http_endpoints:`).
    fn top_level(&self) -> String {
        String::new()
    }

    /// Whether the service keeps every message (a log, a stream, a queue);
    /// false for a key-value store, which keeps each group's last one.
    fn keeps_every_message(&self) -> bool {
        true
    }

    /// The routing keys of a routing function that sends a message
    /// somewhere other than the sink's default; `None` for a type that
    /// takes no routing keys.
    fn routed(&self) -> Option<Route>;

    /// A message no retry can deliver; `None` for a type whose delivery
    /// never fails a message for good (the fixture says why).
    fn permanent(&self) -> Option<Poison>;

    /// Everything delivered so far, in the order the service holds it.
    /// A fixture whose service forgets on a restart remembers what it read
    /// before, so that this grows only. A pull sink's fixture is its
    /// consumer, and receives from `pull`.
    fn read(&self, pull: Option<Pull<'_>>) -> Vec<Seen>;

    /// Takes the service away: new deliveries fail.
    fn stop(&mut self);

    /// Brings the service back.
    fn restart(&mut self);
}

/// A message no retry can deliver, sent in group `poison`.
pub struct Poison {
    /// What a transform returned; `None`: the change's own JSON.
    pub payload: Option<Payload>,
    /// The keys a routing function chose.
    pub route: Option<Route>,
}

/// The group of the [`Poison`] message.
pub const POISON_GROUP: &str = "poison";

/// A pull sink's messages: the store they wait in and the settings its
/// config built.
#[derive(Clone, Copy)]
pub struct Pull<'a> {
    /// The store the consumer receives from.
    pub store: &'a Store,
    /// The sink's pull settings, as built from its `destination:`.
    pub settings: &'a SequinStreamSettings,
}

/// A sink type running against its fixture's service.
pub struct Driver<F: Fixture> {
    /// The service.
    pub fixture: F,
    store: Store,
    pull: Option<SequinStreamSettings>,
    kind: &'static SinkKind,
    waker: DeliveryWaker,
    stop: CancellationToken,
    /// Runs the delivery worker.
    _runtime: tokio::runtime::Runtime,
    next_lsn: u64,
    _dir: tempfile::TempDir,
}

impl<F: Fixture> Driver<F> {
    /// Starts the fixture's service, reads the sink's config, builds its
    /// delivery through its `Sink` implementation and starts delivering.
    pub fn start() -> Driver<F> {
        let fixture = F::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let retries = if F::PULLED {
            ""
        } else {
            "        retry_backoff_base_ms: 100\n        retry_backoff_max_ms: 400\n        request_timeout_ms: 5000\n"
        };
        let yaml = format!(
            "{top}databases:\n  - {{ name: source, hostname: 127.0.0.1, database: source, slot: {{ name: s }}, publication: {{ name: p }} }}\n{databases}sinks:\n  - name: {SINK}\n    database: source\n    destination:\n        type: {kind}\n{destination}{retries}",
            kind = F::TYPE,
            top = fixture.top_level(),
            databases = fixture.databases(),
            destination = fixture.destination(),
        );
        let config = Config::from_yaml(&yaml, dir.path(), &|_| None)
            .unwrap_or_else(|e| panic!("the conformance config does not load: {e}\n{yaml}"));
        let sink = config.sink(SINK).expect("the sink").clone();
        let kind = sink.destination.kind();
        assert_eq!(
            kind.name,
            F::TYPE,
            "the sink built is of the fixture's type"
        );
        let store = Store::open(&dir.path().join("weft.db")).expect("store");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let waker = DeliveryWaker::new();
        let stop = CancellationToken::new();
        let built = {
            let _entered = runtime.enter();
            sink.destination
                .build(&sink, &config)
                .unwrap_or_else(|e| panic!("the {} sink does not build: {e}", kind.name))
        };
        let mut pull = None;
        match built {
            Built::Push { destination, retry } => {
                let worker =
                    DeliveryWorker::new(SINK, store.clone(), destination, retry, waker.clone());
                let until = stop.clone();
                runtime.spawn(async move {
                    worker.run(until).await.expect("the delivery worker runs");
                });
            }
            // Its consumer is the fixture, which pulls as it reads.
            Built::Pull(settings) => pull = Some(settings),
        }
        Driver {
            fixture,
            store,
            pull,
            kind,
            waker,
            stop,
            _runtime: runtime,
            next_lsn: 0,
            _dir: dir,
        }
    }

    /// Stores a message of `group` for the sink, as the pipeline would:
    /// the change's JSON (or `payload`), routed by the sink type's defaults
    /// and the keys a routing function `chose`. Answers its sequence number.
    pub fn send(&mut self, group: &str, payload: Option<Payload>, chose: Option<Route>) -> u64 {
        self.next_lsn += 1;
        let lsn = Lsn(self.next_lsn);
        let group_id = format!("public.{TABLE}:{group}");
        let metadata = Metadata {
            table_schema: "public".into(),
            table_name: TABLE.into(),
            commit_timestamp: "2026-12-07T00:00:00.000000Z".into(),
            commit_lsn: lsn,
            commit_idx: 0,
            idempotency_key: idempotency_key(lsn, 0),
            // Each group is one row: its messages share a key.
            record_pks: vec![group.to_string()],
            database_name: "source".into(),
            transaction_annotations: None,
            enrichment: None,
            webhook_source: None,
            consumer: ConsumerRef::for_sink(SINK),
        };
        let defaults = self
            .kind
            .default_route
            .map(|default| default(Action::Insert.as_str(), &metadata, &group_id));
        if let Some(chose) = &chose {
            route::validate(chose, self.kind.name)
                .unwrap_or_else(|e| panic!("the fixture's route does not fit its sink: {e}"));
        }
        let route = match (defaults, chose) {
            (None, None) => None,
            (defaults, chose) => {
                route::merge(defaults.unwrap_or_default(), chose).boxed_unless_empty()
            }
        };
        let message = Message {
            record: json!({"id": group, "group": group, "seq": self.next_lsn})
                .as_object()
                .expect("an object")
                .clone()
                .into(),
            changes: None,
            action: Action::Insert,
            metadata,
        };
        let payload = payload
            .map(StoredPayload::from)
            .unwrap_or_else(|| StoredPayload::json_of(&message));
        let stored = NewMessage {
            commit_lsn: lsn,
            commit_idx: 0,
            group_id,
            idempotency_key: idempotency_key(lsn, 0),
            payload,
            route,
        };
        self.store
            .append(&[SinkBatch::of(SINK, vec![stored])], lsn)
            .expect("append");
        self.waker.wake();
        self.next_lsn
    }

    /// What the service holds now.
    pub fn seen(&self) -> Vec<Seen> {
        let pull = self.pull.as_ref().map(|settings| Pull {
            store: &self.store,
            settings,
        });
        self.fixture.read(pull)
    }

    /// The sink's dead letters.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.store
            .dead_letters(SINK, 0, 1000)
            .expect("dead letters")
    }

    /// Waits until `done` holds of what the service holds, or fails with
    /// `what`, how many messages it holds and the sink's dead letters.
    pub fn wait_for(&self, what: &str, done: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
        wait::until(
            &format!("{} sink: {what}", self.kind.name),
            PATIENCE,
            Duration::from_millis(100),
            || {
                let seen = self.seen();
                if done(&seen) {
                    Ok(seen)
                } else {
                    Err(format!("{} message(s) held", seen.len()))
                }
            },
            || format!("dead letters: {:?}", self.dead_letter_errors()),
        )
    }

    /// Why each dead letter died.
    fn dead_letter_errors(&self) -> Vec<String> {
        self.dead_letters()
            .into_iter()
            .map(|dead| dead.last_error)
            .collect()
    }

    /// The sink type's kind.
    pub fn kind(&self) -> &'static SinkKind {
        self.kind
    }
}

impl<F: Fixture> Drop for Driver<F> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Per group, the sequence numbers seen, in the order the service holds
/// them, each once (a redelivery is allowed; the first one counts).
fn per_group(seen: &[Seen]) -> BTreeMap<String, Vec<u64>> {
    let mut groups: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut once = BTreeSet::new();
    for (group, seq) in seen.iter().filter_map(Seen::id) {
        if once.insert((group.clone(), seq)) {
            groups.entry(group).or_default().push(seq);
        }
    }
    groups
}

/// Whether every message of `sent` (group, seq) is in `seen`, or, for a
/// service that keeps each group's last message, each group's last one.
fn holds_all(fixture: &impl Fixture, seen: &[Seen], sent: &BTreeMap<String, Vec<u64>>) -> bool {
    let got = per_group(seen);
    sent.iter().all(|(group, seqs)| {
        let Some(have) = got.get(group) else {
            return false;
        };
        if fixture.keeps_every_message() {
            seqs.iter().all(|seq| have.contains(seq))
        } else {
            have.last() == seqs.last()
        }
    })
}

/// Fails unless each group's messages were seen in the order they were
/// sent.
fn assert_in_order(kind: &str, seen: &[Seen]) {
    for (group, seqs) in per_group(seen) {
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "{kind} sink: group {group} arrived out of order: {seqs:?}"
        );
    }
}

/// Each group's messages arrive in commit order.
pub fn order_per_group<F: Fixture>() {
    let mut driver = Driver::<F>::start();
    let mut sent: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for round in 0..10 {
        for group in ["a", "b", "c"] {
            let _ = round;
            let seq = driver.send(group, None, None);
            sent.entry(group.to_string()).or_default().push(seq);
        }
    }
    let seen = driver.wait_for("every group's messages", |seen| {
        holds_all(&driver.fixture, seen, &sent)
    });
    assert_in_order(driver.kind().name, &seen);
    if driver.fixture.keeps_every_message() {
        let got = per_group(&seen);
        assert_eq!(got, sent, "every message arrived once, in order");
    }
}

/// A routing function's keys send a message where they say; the sink's
/// defaults send the rest.
pub fn route_override<F: Fixture>() {
    let mut driver = Driver::<F>::start();
    let Some(routed) = driver.fixture.routed() else {
        assert!(
            driver.kind().routing_keys.is_empty(),
            "{} takes routing keys, so its fixture must route",
            driver.kind().name
        );
        return;
    };
    let routed_seqs: Vec<u64> = (0..3)
        .map(|_| driver.send("routed", None, Some(routed.clone())))
        .collect();
    let plain_seqs: Vec<u64> = (0..2).map(|_| driver.send("plain", None, None)).collect();
    let sent = BTreeMap::from([
        ("routed".to_string(), routed_seqs),
        ("plain".to_string(), plain_seqs),
    ]);
    let seen = driver.wait_for("the routed and the plain messages", |seen| {
        holds_all(&driver.fixture, seen, &sent)
    });
    for message in &seen {
        let Some((group, seq)) = message.id() else {
            continue;
        };
        assert_eq!(
            message.routed,
            group == "routed",
            "{} sink: message {seq} of group {group} went to the {} destination",
            driver.kind().name,
            if message.routed { "routed" } else { "default" }
        );
    }
}

/// A transform's bytes payload arrives byte-exact, with its content type
/// where the service keeps one.
pub fn bytes_exact<F: Fixture>() {
    let mut driver = Driver::<F>::start();
    if !driver.kind().carries_bytes {
        // The pipeline dead-letters such a message before it is stored,
        // naming the sink type (see weft_pipeline's SinkPipeline).
        return;
    }
    let payload = Payload::Bytes {
        content_type: BYTES_TYPE.into(),
        data: bytes_payload(),
    };
    driver.send("bytes", Some(payload), None);
    let seen = driver.wait_for("the bytes payload", |seen| {
        seen.iter().any(|m| m.body == bytes_payload())
    });
    let message = seen
        .iter()
        .find(|m| m.body == bytes_payload())
        .expect("found above");
    if let Some(content_type) = &message.content_type {
        assert_eq!(
            content_type,
            BYTES_TYPE,
            "{} sink: the content type",
            driver.kind().name
        );
    }
}

/// A failure no retry can fix dead-letters its message after one attempt,
/// and other groups keep flowing; a failure a retry can fix (the service
/// down) keeps the message until it is delivered.
pub fn retriable_and_permanent<F: Fixture>() {
    let mut driver = Driver::<F>::start();
    let permanent = driver.fixture.permanent();
    let dead_before = usize::from(permanent.is_some());
    if let Some(poison) = permanent {
        driver.send(POISON_GROUP, poison.payload, poison.route);
        let healthy = driver.send("healthy", None, None);
        driver.wait_for("the healthy message", |seen| {
            seen.iter()
                .filter_map(Seen::id)
                .any(|(_, seq)| seq == healthy)
        });
        wait::until(
            &format!(
                "{} sink: the permanent failure dead-lettered",
                driver.kind().name
            ),
            PATIENCE,
            Duration::from_millis(100),
            || {
                // Reading drives a pull sink's consumer, whose next receive
                // dead-letters what it nacked.
                driver.seen();
                if driver.dead_letters().is_empty() {
                    Err("no dead letter")
                } else {
                    Ok(())
                }
            },
            String::new,
        );
        let dead = driver.dead_letters();
        assert_eq!(dead.len(), 1, "only the poison message is dead");
        assert_eq!(dead[0].group_id, format!("public.{TABLE}:{POISON_GROUP}"));
        assert_eq!(
            dead[0].attempts,
            1,
            "{} sink: a permanent failure is not retried: {}",
            driver.kind().name,
            dead[0].last_error
        );
        assert!(!dead[0].last_error.is_empty(), "the dead letter says why");
    }

    driver.fixture.stop();
    let later = driver.send("later", None, None);
    // Several retries' worth (100 ms doubling up to 400 ms).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        driver.dead_letters().len(),
        dead_before,
        "{} sink: a retriable failure dead-lettered its message",
        driver.kind().name
    );
    driver.fixture.restart();
    driver.wait_for("the message stored while the service was down", |seen| {
        seen.iter()
            .filter_map(Seen::id)
            .any(|(_, seq)| seq == later)
    });
}

/// The service going away mid-stream and coming back loses no message and
/// reorders none.
pub fn outage_loses_nothing<F: Fixture>() {
    let mut driver = Driver::<F>::start();
    let groups = ["a", "b", "c", "d"];
    let mut sent: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let send_round = |driver: &mut Driver<F>, sent: &mut BTreeMap<String, Vec<u64>>| {
        for _ in 0..5 {
            for group in groups {
                let seq = driver.send(group, None, None);
                sent.entry(group.to_string()).or_default().push(seq);
            }
        }
    };
    send_round(&mut driver, &mut sent);
    let before = sent.clone();
    driver.wait_for("the messages before the outage", |seen| {
        holds_all(&driver.fixture, seen, &before)
    });
    driver.fixture.stop();
    send_round(&mut driver, &mut sent);
    std::thread::sleep(Duration::from_secs(1));
    driver.fixture.restart();
    let seen = driver.wait_for("every message, after the outage", |seen| {
        holds_all(&driver.fixture, seen, &sent)
    });
    assert_in_order(driver.kind().name, &seen);
    assert!(
        driver.dead_letters().is_empty(),
        "{} sink: the outage dead-lettered messages",
        driver.kind().name
    );
}

/// Keeps what a fixture read before, so that a service that forgets on a
/// restart still shows what it delivered before it.
#[derive(Default)]
pub struct Memory(std::sync::Mutex<Vec<Seen>>);

impl Memory {
    /// What was read before, followed by each of `now` not read before.
    pub fn merge(&self, now: Vec<Seen>) -> Vec<Seen> {
        let mut kept = self.0.lock().unwrap();
        for message in now {
            if !kept.contains(&message) {
                kept.push(message);
            }
        }
        kept.clone()
    }
}

/// The checks' own logic, on made-up deliveries: each catches what it
/// looks for (a check that cannot fail would prove nothing).
#[cfg(test)]
mod checks {
    use super::*;

    fn seen(group: &str, seq: u64) -> Seen {
        Seen {
            body: serde_json::to_vec(&json!({"record": {"group": group, "seq": seq}})).unwrap(),
            content_type: None,
            routed: false,
        }
    }

    #[test]
    #[should_panic(expected = "group a arrived out of order: [2, 1]")]
    fn a_group_out_of_order_fails() {
        assert_in_order("test", &[seen("a", 2), seen("b", 3), seen("a", 1)]);
    }

    #[test]
    fn a_redelivery_counts_once_and_other_groups_may_interleave() {
        let deliveries = [seen("a", 1), seen("b", 2), seen("a", 1), seen("a", 3)];
        assert_in_order("test", &deliveries);
        assert_eq!(
            per_group(&deliveries),
            BTreeMap::from([("a".into(), vec![1, 3]), ("b".into(), vec![2])])
        );
    }
}
