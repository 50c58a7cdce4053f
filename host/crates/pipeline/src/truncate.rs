//! TRUNCATE in the pipeline, by each sink's `truncate` option.
//!
//! A TRUNCATE empties whole tables without a row in the WAL, so there is no
//! message per row. With `skip` (the default; Sequin's message format has
//! no truncate action) the sink gets nothing and a warning names it. With
//! `deliver` the sink gets one [`TruncateMessage`] per truncated table it
//! takes, at the table's own position in the transaction, so it is stored
//! and handed out in commit order among the changes.
//!
//! Its message group is the table (`schema.table`): truncates of one table
//! go out one at a time, in order. Functions do not run on it (the plugin
//! contract has no truncate action); it takes the sink's default route with
//! `truncate` as the action.

use weft_core::change::Truncate;
use weft_core::message::{ConsumerRef, TruncateMessage};
use weft_sinks::config::{SinkConfig, TruncatePolicy};
use weft_store::{NewMessage, StoredPayload};

use weft_sinks::route as default_route;
use weft_store::StoredUpTo;

/// Adds the [`messages`] of `truncates` for `sink` to the sink's
/// `messages` of a batch, keeping them in commit order: push sinks deliver
/// in the order messages are stored.
pub fn add_messages(
    messages: &mut Vec<NewMessage>,
    sink: &SinkConfig,
    truncates: &[Truncate],
    stored: StoredUpTo,
) {
    let added = self::messages(sink, truncates, stored);
    if !added.is_empty() {
        messages.extend(added);
        messages.sort_by_key(|m| (m.commit_lsn, m.commit_idx));
    }
}

/// The messages for the tables of `truncates` that `sink` takes, when it
/// delivers truncates, leaving out those it `stored` already.
pub fn messages(sink: &SinkConfig, truncates: &[Truncate], stored: StoredUpTo) -> Vec<NewMessage> {
    if sink.truncate != TruncatePolicy::Deliver {
        return Vec::new();
    }
    let consumer = ConsumerRef::for_sink(&sink.name);
    let mut messages = Vec::new();
    for truncate in truncates
        .iter()
        .filter(|t| !stored.holds(t.commit_lsn, t.last_idx()))
    {
        for (relation, commit_idx) in truncate.tables() {
            if !sink.source.includes(&relation.schema, &relation.name) {
                continue;
            }
            let message = TruncateMessage::new(
                truncate,
                relation,
                commit_idx,
                sink.database_name(),
                &consumer,
            );
            let group_id = relation.qualified_name();
            let route = default_route::truncate_route(
                sink.destination.type_name(),
                &message.metadata.common,
                &group_id,
            );
            messages.push(NewMessage {
                commit_lsn: truncate.commit_lsn,
                commit_idx,
                group_id,
                idempotency_key: message.metadata.common.idempotency_key.clone(),
                payload: StoredPayload::json_of(&message),
                route: route.boxed_unless_empty(),
            });
        }
    }
    messages
}

/// Logs each TRUNCATE that some sink taking its tables skips, naming the
/// tables and those sinks, and counts it in `skipped_total`.
pub fn warn_skipped<'a>(
    sinks: impl Iterator<Item = &'a SinkConfig> + Clone,
    truncates: &[Truncate],
    skipped_total: &mut u64,
) {
    for truncate in truncates {
        let skipping: Vec<&str> = sinks
            .clone()
            .filter(|sink| {
                sink.truncate == TruncatePolicy::Skip
                    && truncate
                        .relations
                        .iter()
                        .any(|r| sink.source.includes(&r.schema, &r.name))
            })
            .map(|sink| sink.name.as_str())
            .collect();
        if skipping.is_empty() {
            continue;
        }
        *skipped_total += 1;
        let tables: Vec<String> = truncate
            .relations
            .iter()
            .map(|r| r.qualified_name())
            .collect();
        tracing::warn!(
            tables = %tables.join(", "),
            sinks = %skipping.join(", "),
            commit_lsn = %truncate.commit_lsn,
            skipped_total = *skipped_total,
            "TRUNCATE skipped: these sinks receive no message for it; set `truncate: deliver` on a sink to receive one (see docs/replication.md)"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weft_core::change::Relation;
    use weft_core::lsn::Lsn;
    use weft_sinks::config::Config;

    fn relation(name: &str) -> Arc<Relation> {
        Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: name.into(),
            columns: vec![],
            primary_key: vec!["id".into()],
        })
    }

    fn sink(options: &str) -> SinkConfig {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_yaml(
            &format!(
                "databases:
  - {{name: db, hostname: h, database: d, slot: {{name: s}}, publication: {{name: p}}}}
sinks:
  - {{name: k, database: db, {options} destination: {{type: nats, host: n}}}}
"
            ),
            dir.path(),
            &|_| None,
        )
        .unwrap();
        config.sinks[0].clone()
    }

    fn truncate(lsn: u64) -> Truncate {
        Truncate {
            relations: vec![relation("orders"), relation("lines"), relation("other")],
            cascade: true,
            restart_identity: false,
            commit_lsn: Lsn(lsn),
            commit_idx: 3,
            xid: 9,
            commit_timestamp: chrono::Utc::now(),
        }
    }

    #[test]
    fn each_taken_table_is_a_message_at_its_own_position() {
        let deliver =
            sink("truncate: deliver, source: {include_tables: [public.orders, public.lines]},");
        let delivered = messages(
            &deliver,
            &[truncate(50), truncate(80)],
            StoredUpTo::through(Lsn(50)),
        );
        let positions: Vec<(Lsn, u32, &str)> = delivered
            .iter()
            .map(|m| (m.commit_lsn, m.commit_idx, m.group_id.as_str()))
            .collect();
        assert_eq!(
            positions,
            vec![(Lsn(80), 3, "public.orders"), (Lsn(80), 4, "public.lines")]
        );
        let weft_core::payload::Payload::Json(json) = delivered[1].payload.to_payload().unwrap()
        else {
            panic!("JSON payload")
        };
        assert_eq!(json["action"], "truncate");
        assert_eq!(json["record"], serde_json::json!({}));
        assert_eq!(json["changes"], serde_json::Value::Null);
        assert_eq!(json["metadata"]["table_name"], "lines");
        assert_eq!(json["metadata"]["commit_idx"], 4);
        assert_eq!(json["metadata"]["database_name"], "db");
        assert_eq!(json["metadata"]["record_pks"], serde_json::json!([]));
        assert_eq!(
            json["metadata"]["truncate"],
            serde_json::json!({"cascade": true, "restart_identity": false})
        );
        assert_eq!(
            json["metadata"]["idempotency_key"],
            weft_core::message::idempotency_key(Lsn(80), 4)
        );
        assert_eq!(
            delivered[0]
                .route
                .as_ref()
                .and_then(|r| r.subject.as_deref()),
            Some("sequin.db.public.orders.truncate")
        );
        assert!(messages(&sink(""), &[truncate(80)], StoredUpTo::default()).is_empty());
    }

    #[test]
    fn a_truncate_in_the_stored_part_of_an_open_transaction_is_not_stored_again() {
        let deliver = sink("truncate: deliver,");
        // The truncate at 80 spans commit_idx 3 to 5, one per table.
        let stored_through = |idx| StoredUpTo {
            cursor: Lsn(50),
            open: Some((Lsn(80), idx)),
        };
        assert!(messages(&deliver, &[truncate(80)], stored_through(5)).is_empty());
        assert!(messages(&deliver, &[truncate(80)], stored_through(9)).is_empty());
        let after_the_stored_part = messages(&deliver, &[truncate(80)], stored_through(2));
        assert_eq!(
            after_the_stored_part
                .iter()
                .map(|m| m.commit_idx)
                .collect::<Vec<_>>(),
            [3, 4, 5]
        );
        assert_eq!(
            messages(&deliver, &[truncate(90)], stored_through(9)).len(),
            3,
            "a later transaction"
        );
    }

    #[test]
    fn only_sinks_that_skip_a_table_they_take_count_it() {
        let deliver = sink("truncate: deliver,");
        let elsewhere = sink("source: {include_tables: [public.elsewhere]},");
        let mut skipped = 0;
        warn_skipped(
            [&deliver, &elsewhere].into_iter(),
            &[truncate(1)],
            &mut skipped,
        );
        assert_eq!(skipped, 0);
        let skipping = sink("");
        warn_skipped(
            [&deliver, &skipping].into_iter(),
            &[truncate(1)],
            &mut skipped,
        );
        assert_eq!(skipped, 1);
    }
}
