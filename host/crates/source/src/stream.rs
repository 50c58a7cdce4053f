//! One replication session: connect, check, stream, decode, emit, confirm.
//!
//! Ordering: a plain transaction arrives from pgoutput only once committed
//! (Begin … Commit), so its changes are emitted as they are decoded. A
//! streamed transaction (proto v2 `streaming 'on'`) arrives in chunks while
//! still running; its changes wait in a [`TransactionBuffer`] (in memory,
//! then on disk past a threshold; see [`super::spill`]) until Stream Commit
//! and are dropped on Stream Abort (for a subtransaction: only the
//! subtransaction's changes).
//!
//! Heartbeats (see [`super::heartbeat`]) are written on the session's query
//! connection; their transactions come back as empty commits, which the
//! pipeline confirms.
//!
//! Confirmation: the standby status update's flush and apply LSNs are the
//! latest value of the `durable` watch, never more. It is sent when the
//! server asks, when `durable` changes (at most once a second) and at least
//! every 10 seconds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::events::EventSender;
use super::heartbeat::{HEARTBEAT_PREFIX, HeartbeatContent, HeartbeatWatch};
use super::pgoutput::{Decoder, LogicalMessage, OldTuple, PgTimestamp};
use super::relation::Relations;
use super::spill::{PendingChange, PendingKind, SPILL_THRESHOLD_BYTES, TransactionBuffer};
use super::{SourceConfig, SourceError, slot};
use weft_core::change::{
    Action, Change, Relation, Row, SourceEvent, Truncate, WATERMARK_PREFIX, Watermark,
};
use weft_core::lsn::Lsn;
use weft_postgres::PgError;
use weft_postgres::protocol::{ReplicationConnection, ReplicationFrame, quote_ident};

/// Status updates go out at least this often, keeping the walsender's
/// `wal_sender_timeout` from firing.
const STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// Status updates triggered by `durable` changes are throttled to this.
const STATUS_THROTTLE: Duration = Duration::from_secs(1);
/// Periodic status updates ask the server for a keepalive, so a connection
/// that stays silent this long while weft waits to read is dead.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What survives reconnects within one [`super::run`].
#[derive(Debug, Default)]
pub struct Progress {
    /// The end LSN of the last transaction emitted; after a reconnect the
    /// server resends from the slot's confirmed position, and transactions
    /// committed before this are skipped.
    emitted_through: Lsn,
    /// Whether a session reached streaming since the last check.
    streamed: bool,
}

impl Progress {
    /// Whether a session reached streaming since the last call.
    pub fn take_streamed(&mut self) -> bool {
        std::mem::take(&mut self.streamed)
    }
}

/// The plain (non-streamed) transaction being received.
struct OpenTransaction {
    xid: u32,
    commit_lsn: Lsn,
    commit_timestamp: DateTime<Utc>,
    next_idx: u32,
    /// Already emitted before a reconnect.
    skip: bool,
}

/// One connected replication session.
pub struct Session<'a> {
    replication: ReplicationConnection,
    client: Arc<tokio_postgres::Client>,
    relations: Relations,
    spill_dir: &'a std::path::Path,
    heartbeat_session: uuid::Uuid,
    heartbeat_watch: HeartbeatWatch,
    decoder: Decoder,
    events: &'a EventSender,
    durable: watch::Receiver<Lsn>,
    shutdown: &'a CancellationToken,
    progress: &'a mut Progress,
    open: Option<OpenTransaction>,
    streams: HashMap<u32, TransactionBuffer>,
    current_stream: Option<u32>,
    received: Lsn,
    last_status: Instant,
    status_due: bool,
    /// When weft last went back to reading (after a frame was handled).
    reading_since: Instant,
}

/// Why the emit loop stopped without an error.
enum Stop {
    Shutdown,
}

impl<'a> Session<'a> {
    /// Connects, checks and streams until shutdown (`Ok`) or an error.
    pub async fn run(
        config: &SourceConfig,
        events: &'a EventSender,
        durable: watch::Receiver<Lsn>,
        shutdown: &'a CancellationToken,
        progress: &'a mut Progress,
    ) -> Result<(), SourceError> {
        let options = &config.connection;
        let (client, connection_task) = options.connect_query().await?;
        let client = Arc::new(client);
        let heartbeat_session = uuid::Uuid::new_v4();
        let mut heartbeat_task = None;
        let mut stats_task = None;
        let result = async {
            // Setup can wait long (CREATE_REPLICATION_SLOT waits for running
            // transactions), so shutdown interrupts it.
            let setup = async {
                weft_postgres::check_server(&client, &options.user).await?;
                slot::ensure_publication(&client, config).await?;
                let mut replication = ReplicationConnection::connect(options).await?;
                slot::ensure_slot(&client, &mut replication, config).await?;
                let identity = replication.identify_system().await?;
                tracing::info!(system_id = %identity.system_id, timeline = identity.timeline,
                    wal = %identity.xlog_pos, "replication connection ready");

                let streaming = replication.server_version() >= 140000;
                let mut plugin_options = vec![
                    (
                        "proto_version",
                        if streaming { "2" } else { "1" }.to_string(),
                    ),
                    ("publication_names", quote_ident(&config.publication_name)),
                ];
                if streaming {
                    plugin_options.push(("messages", "true".to_string()));
                    plugin_options.push(("streaming", "on".to_string()));
                }
                // 0/0: start from the slot's confirmed position.
                replication
                    .start_replication(&config.slot_name, Lsn::ZERO, &plugin_options)
                    .await?;
                tracing::info!(streaming, "replication started");
                let health = weft_core::health::global();
                health.clear(
                    weft_core::health::EntityKind::Slot,
                    &config.slot_name,
                    super::REPLICATION_CHECK,
                );
                health.succeeded(weft_core::health::EntityKind::Slot, &config.slot_name);
                Ok::<_, SourceError>(replication)
            };
            let replication = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                replication = setup => replication?,
            };
            progress.streamed = true;
            let heartbeat_watch = HeartbeatWatch::start();
            if let Some(interval) = config.heartbeat_interval {
                heartbeat_task = Some(super::heartbeat::spawn(
                    Arc::clone(&client),
                    interval,
                    heartbeat_session,
                    heartbeat_watch.clone(),
                    config.slot_name.clone(),
                ));
            }
            stats_task = Some(super::slot_stats::spawn(
                Arc::clone(&client),
                config.name.clone(),
                config.slot_name.clone(),
                config.lag_warning_bytes,
            ));
            let mut session = Session {
                replication,
                client: Arc::clone(&client),
                relations: Relations::new(&config.name),
                spill_dir: &config.spill_dir,
                heartbeat_session,
                heartbeat_watch,
                decoder: Decoder::new(),
                events,
                durable,
                shutdown,
                progress,
                open: None,
                streams: HashMap::new(),
                current_stream: None,
                received: Lsn::ZERO,
                last_status: Instant::now(),
                status_due: false,
                reading_since: Instant::now(),
            };
            let outcome = session.stream().await;
            if matches!(outcome, Ok(Stop::Shutdown)) {
                // Best effort: report what is durable, then say goodbye.
                let flushed = *session.durable.borrow();
                let _ = session
                    .replication
                    .send_status(session.received, flushed, false)
                    .await;
                session.replication.close().await;
            }
            outcome.map(|_| ())
        }
        .await;
        for task in [heartbeat_task, stats_task].into_iter().flatten() {
            task.abort();
        }
        connection_task.abort();
        result
    }

    async fn stream(&mut self) -> Result<Stop, SourceError> {
        let mut ticker = tokio::time::interval(STATUS_THROTTLE);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(Stop::Shutdown),
                changed = self.durable.changed() => {
                    if changed.is_err() {
                        // The pipeline is gone; nothing more can be confirmed.
                        return Err(SourceError::PipelineClosed);
                    }
                    self.status_due = true;
                }
                _ = ticker.tick() => {
                    if self.reading_since.elapsed() > READ_TIMEOUT {
                        return Err(PgError::Io(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no message from the server for {} s", READ_TIMEOUT.as_secs()),
                        ))
                        .into());
                    }
                    self.maybe_send_status().await?;
                }
                frame = self.replication.next_frame() => {
                    let frame = frame?;
                    self.reading_since = Instant::now();
                    match frame {
                        ReplicationFrame::XLogData { wal_start, data, .. } => {
                            self.received = self.received.max(wal_start);
                            let message = self.decoder.decode(data)?;
                            if let Some(stop) = self.handle(message).await? {
                                return Ok(stop);
                            }
                            self.reading_since = Instant::now();
                        }
                        ReplicationFrame::Keepalive { wal_end, reply_requested } => {
                            if reply_requested {
                                self.send_status(false).await?;
                            }
                            if self.open.is_none() && self.streams.is_empty() {
                                self.received = self.received.max(wal_end);
                                if let Some(stop) = self.emit(SourceEvent::Idle { wal_end }).await? {
                                    return Ok(stop);
                                }
                                self.reading_since = Instant::now();
                            }
                        }
                        ReplicationFrame::End => {
                            return Err(PgError::Io(std::io::Error::new(
                                std::io::ErrorKind::ConnectionAborted,
                                "the server ended the replication stream",
                            ))
                            .into());
                        }
                    }
                }
            }
        }
    }

    async fn maybe_send_status(&mut self) -> Result<(), SourceError> {
        let elapsed = self.last_status.elapsed();
        if elapsed >= STATUS_INTERVAL {
            // Ask for a keepalive back: it proves the connection is alive.
            self.send_status(true).await?;
        } else if self.status_due && elapsed >= STATUS_THROTTLE {
            self.send_status(false).await?;
        }
        Ok(())
    }

    async fn send_status(&mut self, ask_for_reply: bool) -> Result<(), SourceError> {
        let flushed = *self.durable.borrow_and_update();
        self.replication
            .send_status(self.received.max(flushed), flushed, ask_for_reply)
            .await?;
        self.last_status = Instant::now();
        self.status_due = false;
        tracing::trace!(%flushed, "sent standby status");
        Ok(())
    }

    /// Sends one event to the pipeline, keeping the replication connection
    /// alive (status updates) while the pipeline applies backpressure.
    async fn emit(&mut self, event: SourceEvent) -> Result<Option<Stop>, SourceError> {
        let events = self.events;
        if let Some(room) = events
            .try_reserve(&event)
            .map_err(|_| SourceError::PipelineClosed)?
        {
            room.send(event);
            return Ok(None);
        }
        let mut ticker = tokio::time::interval(STATUS_THROTTLE);
        ticker.tick().await;
        loop {
            tokio::select! {
                biased;
                room = events.reserve(&event) => {
                    let room = room.map_err(|_| SourceError::PipelineClosed)?;
                    room.send(event);
                    return Ok(None);
                }
                _ = self.shutdown.cancelled() => return Ok(Some(Stop::Shutdown)),
                _ = ticker.tick() => {
                    if self.durable.has_changed().unwrap_or(false) {
                        self.status_due = true;
                    }
                    self.maybe_send_status().await?;
                }
            }
        }
    }

    async fn handle(&mut self, message: LogicalMessage) -> Result<Option<Stop>, SourceError> {
        match message {
            LogicalMessage::Begin {
                final_lsn,
                commit_timestamp,
                xid,
            } => {
                self.open = Some(OpenTransaction {
                    xid,
                    commit_lsn: final_lsn,
                    commit_timestamp: timestamp(commit_timestamp),
                    next_idx: 0,
                    skip: final_lsn < self.progress.emitted_through,
                });
            }
            LogicalMessage::Commit {
                commit_lsn,
                end_lsn,
                ..
            } => {
                let open = self
                    .open
                    .take()
                    .ok_or_else(|| SourceError::Protocol("Commit without a Begin".into()))?;
                if !open.skip {
                    let stop = self
                        .emit(SourceEvent::Commit {
                            commit_lsn,
                            end_lsn,
                        })
                        .await?;
                    self.progress.emitted_through = self.progress.emitted_through.max(end_lsn);
                    return Ok(stop);
                }
            }
            LogicalMessage::Relation {
                oid,
                namespace,
                name,
                replica_identity,
                columns,
                ..
            } => {
                let tracked = self
                    .relations
                    .apply(
                        &self.client,
                        oid,
                        namespace,
                        name,
                        replica_identity,
                        columns,
                    )
                    .await?;
                tracing::debug!(relation = %tracked.relation.qualified_name(), "relation described");
            }
            LogicalMessage::Insert { xid, relation, new } => {
                let row = self
                    .relations
                    .row(&self.client, relation, &new, None)
                    .await?;
                let relation = self.relation(relation)?.relation.clone();
                return self
                    .change(xid, relation, Action::Insert, Some(row), None)
                    .await;
            }
            LogicalMessage::Update {
                xid,
                relation,
                old,
                new,
            } => {
                let old_row = match &old {
                    Some(o) => Some(
                        self.relations
                            .row(&self.client, relation, o.values(), None)
                            .await?,
                    ),
                    None => None,
                };
                let full_old = match &old {
                    Some(OldTuple::Full(_)) => old_row.as_ref(),
                    _ => None,
                };
                let new_row = self
                    .relations
                    .row(&self.client, relation, &new, full_old)
                    .await?;
                let old_row = old_row.map(|r| only_sent_columns(r, old.as_ref()));
                let relation = self.relation(relation)?.relation.clone();
                return self
                    .change(xid, relation, Action::Update, Some(new_row), old_row)
                    .await;
            }
            LogicalMessage::Delete { xid, relation, old } => {
                let old_row = self
                    .relations
                    .row(&self.client, relation, old.values(), None)
                    .await?;
                let old_row = only_sent_columns(old_row, Some(&old));
                let relation = self.relation(relation)?.relation.clone();
                return self
                    .change(xid, relation, Action::Delete, None, Some(old_row))
                    .await;
            }
            LogicalMessage::Truncate {
                xid,
                options,
                relations,
            } => {
                let relations = relations
                    .iter()
                    .map(|&oid| self.relation(oid).map(|t| t.relation.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                return self
                    .truncate(xid, relations, options & 1 == 1, options & 2 == 2)
                    .await;
            }
            LogicalMessage::Message {
                prefix,
                lsn,
                content,
                ..
            } => {
                if prefix == HEARTBEAT_PREFIX {
                    if let Some(latency) =
                        HeartbeatContent::round_trip(&content, self.heartbeat_session, Utc::now())
                    {
                        self.heartbeat_watch.seen();
                        tracing::debug!(latency_ms = latency.as_millis() as u64, %lsn, "heartbeat round trip");
                    }
                } else if prefix == WATERMARK_PREFIX {
                    return self.watermark(content).await;
                } else {
                    tracing::debug!(%prefix, %lsn, "logical message ignored");
                }
            }
            LogicalMessage::Origin { .. } | LogicalMessage::Type { .. } => {}
            LogicalMessage::StreamStart { xid, .. } => {
                self.current_stream = Some(xid);
                let dir = self.spill_dir;
                self.streams
                    .entry(xid)
                    .or_insert_with(|| TransactionBuffer::new(xid, dir, SPILL_THRESHOLD_BYTES));
            }
            LogicalMessage::StreamStop => self.current_stream = None,
            LogicalMessage::StreamAbort { xid, subxid } => {
                if xid == subxid {
                    self.streams.remove(&xid);
                } else if let Some(buffer) = self.streams.get_mut(&xid) {
                    buffer.abort_subtransaction(subxid);
                }
            }
            LogicalMessage::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_timestamp,
                ..
            } => {
                // A transaction whose every chunk was empty may have no buffer.
                let buffer = self.streams.remove(&xid).unwrap_or_else(|| {
                    TransactionBuffer::new(xid, self.spill_dir, SPILL_THRESHOLD_BYTES)
                });
                if commit_lsn < self.progress.emitted_through {
                    return Ok(None);
                }
                let commit_timestamp = timestamp(commit_timestamp);
                let spilled = buffer.spilled();
                let mut replay = buffer.into_replay()?;
                let mut idx: u32 = 0;
                while let Some(pending) = replay.next_change()? {
                    let event = match pending.kind {
                        PendingKind::Row { action, new, old } => SourceEvent::Change(Change {
                            relation: pending.relation,
                            action,
                            commit_lsn,
                            commit_idx: idx,
                            xid,
                            commit_timestamp,
                            new,
                            old,
                            backfill: None,
                            webhook: None,
                        }),
                        PendingKind::Truncate {
                            mut more,
                            cascade,
                            restart_identity,
                        } => {
                            more.insert(0, pending.relation);
                            let truncate = Truncate {
                                relations: more,
                                cascade,
                                restart_identity,
                                commit_lsn,
                                commit_idx: idx,
                                xid,
                                commit_timestamp,
                            };
                            // One position per table (see Truncate::tables).
                            idx = truncate.last_idx();
                            SourceEvent::Truncate(truncate)
                        }
                    };
                    idx += 1;
                    if let Some(stop) = self.emit(event).await? {
                        return Ok(Some(stop));
                    }
                }
                if spilled {
                    tracing::debug!(xid, changes = idx, %commit_lsn, "replayed a spilled transaction");
                }
                let stop = self
                    .emit(SourceEvent::Commit {
                        commit_lsn,
                        end_lsn,
                    })
                    .await?;
                self.progress.emitted_through = self.progress.emitted_through.max(end_lsn);
                return Ok(stop);
            }
        }
        Ok(None)
    }

    fn relation(&self, oid: u32) -> Result<&super::relation::TrackedRelation, SourceError> {
        self.relations.get(oid).ok_or_else(|| {
            SourceError::Protocol(format!(
                "a change for relation {oid} came before its Relation message"
            ))
        })
    }

    /// Emits a backfill watermark at its position in its transaction. One
    /// outside a plain transaction (non-transactional, or in a streamed
    /// one) is not weft's: backfills write theirs in their own transaction.
    async fn watermark(&mut self, content: bytes::Bytes) -> Result<Option<Stop>, SourceError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(None);
        };
        if open.skip {
            return Ok(None);
        }
        let watermark = Watermark {
            content: String::from_utf8_lossy(&content).into_owned(),
            commit_lsn: open.commit_lsn,
            commit_idx: open.next_idx,
            xid: open.xid,
            commit_timestamp: open.commit_timestamp,
        };
        open.next_idx += 1;
        self.emit(SourceEvent::Watermark(watermark)).await
    }

    async fn change(
        &mut self,
        xid: Option<u32>,
        relation: Arc<Relation>,
        action: Action,
        new: Option<Row>,
        old: Option<Row>,
    ) -> Result<Option<Stop>, SourceError> {
        if let Some(subxid) = xid {
            let top = self.current_stream.ok_or_else(|| {
                SourceError::Protocol("a streamed change outside Stream Start/Stop".into())
            })?;
            self.stream_buffer(top)?.push(PendingChange {
                subxid,
                relation,
                kind: PendingKind::Row { action, new, old },
            })?;
            return Ok(None);
        }
        let open = self
            .open
            .as_mut()
            .ok_or_else(|| SourceError::Protocol("a change outside a transaction".into()))?;
        if open.skip {
            return Ok(None);
        }
        let change = Change {
            relation,
            action,
            commit_lsn: open.commit_lsn,
            commit_idx: open.next_idx,
            xid: open.xid,
            commit_timestamp: open.commit_timestamp,
            new,
            old,
            backfill: None,
            webhook: None,
        };
        open.next_idx += 1;
        self.emit(SourceEvent::Change(change)).await
    }
}

impl Session<'_> {
    /// The buffer of the streamed transaction `top`, which Stream Start opened.
    fn stream_buffer(&mut self, top: u32) -> Result<&mut TransactionBuffer, SourceError> {
        self.streams.get_mut(&top).ok_or_else(|| {
            SourceError::Protocol(format!("a change of transaction {top} outside its stream"))
        })
    }

    async fn truncate(
        &mut self,
        xid: Option<u32>,
        mut relations: Vec<Arc<Relation>>,
        cascade: bool,
        restart_identity: bool,
    ) -> Result<Option<Stop>, SourceError> {
        if relations.is_empty() {
            return Ok(None);
        }
        if let Some(subxid) = xid {
            let top = self.current_stream.ok_or_else(|| {
                SourceError::Protocol("a streamed TRUNCATE outside Stream Start/Stop".into())
            })?;
            let first = relations.remove(0);
            self.stream_buffer(top)?.push(PendingChange {
                subxid,
                relation: first,
                kind: PendingKind::Truncate {
                    more: relations,
                    cascade,
                    restart_identity,
                },
            })?;
            return Ok(None);
        }
        let open = self
            .open
            .as_mut()
            .ok_or_else(|| SourceError::Protocol("a TRUNCATE outside a transaction".into()))?;
        if open.skip {
            return Ok(None);
        }
        let truncate = Truncate {
            relations,
            cascade,
            restart_identity,
            commit_lsn: open.commit_lsn,
            commit_idx: open.next_idx,
            xid: open.xid,
            commit_timestamp: open.commit_timestamp,
        };
        // One position per table (see Truncate::tables).
        open.next_idx = truncate.last_idx() + 1;
        self.emit(SourceEvent::Truncate(truncate)).await
    }
}

/// A key-only old tuple ('K') carries NULLs for the non-key columns; keep
/// just the key columns the server actually sent.
fn only_sent_columns(row: Row, old: Option<&OldTuple>) -> Row {
    match old {
        Some(OldTuple::Key(values)) => row
            .into_iter()
            .zip(values)
            .filter(|(_, v)| !matches!(v, super::pgoutput::TupleValue::Null))
            .map(|(kv, _)| kv)
            .collect(),
        _ => row,
    }
}

/// Postgres timestamps count microseconds from 2000-01-01 UTC.
fn timestamp(micros: PgTimestamp) -> DateTime<Utc> {
    const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
    DateTime::from_timestamp_micros(micros.saturating_add(PG_EPOCH_MICROS)).unwrap_or_default()
}
