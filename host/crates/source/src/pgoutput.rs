//! Decoder for the `pgoutput` logical decoding protocol, versions 1 and 2.
//!
//! Each XLogData payload holds exactly one pgoutput message. Inside a
//! streamed transaction (between Stream Start and Stream Stop) the
//! row-level messages carry the (sub)transaction id as a prefix, so the
//! [`Decoder`] keeps that one bit of state. Malformed or truncated input is
//! an error, never a panic.

use bytes::{Buf, Bytes};

use weft_core::lsn::Lsn;

/// A pgoutput message that could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The message ended before a field was complete.
    #[error("pgoutput message {tag:?} is truncated: {field} needs more bytes")]
    Truncated {
        /// The message type byte.
        tag: char,
        /// The field being read.
        field: &'static str,
    },
    /// A byte had a value the protocol does not allow.
    #[error("pgoutput message {tag:?} has an invalid {field}: {value:#04x}")]
    Invalid {
        /// The message type byte.
        tag: char,
        /// The field being read.
        field: &'static str,
        /// The offending value.
        value: u8,
    },
    /// A string field was not UTF-8 (weft requires UTF-8 databases).
    #[error("pgoutput message {tag:?} has a {field} that is not UTF-8; use a UTF8 database")]
    NotUtf8 {
        /// The message type byte.
        tag: char,
        /// The field being read.
        field: &'static str,
    },
    /// The message type byte is unknown.
    #[error("unknown pgoutput message type {0:#04x}")]
    UnknownTag(u8),
    /// The payload was empty.
    #[error("empty pgoutput message")]
    Empty,
}

/// Microseconds since 2000-01-01 00:00:00 UTC, as Postgres sends timestamps.
pub type PgTimestamp = i64;

/// One column value in a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TupleValue {
    /// SQL NULL.
    Null,
    /// An unchanged TOASTed value that the server did not send.
    UnchangedToast,
    /// The value in text format.
    Text(Bytes),
    /// The value in binary format.
    Binary(Bytes),
}

/// A row image: one value per column of the relation.
pub type Tuple = Vec<TupleValue>;

/// A column as the Relation message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Whether the column is part of the replica identity.
    pub is_key: bool,
    /// The column name.
    pub name: String,
    /// The type OID.
    pub type_oid: u32,
    /// The type modifier.
    pub type_modifier: i32,
}

/// The old row image of an update or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// Only the replica identity columns ('K').
    Key(Tuple),
    /// The whole old row, under REPLICA IDENTITY FULL ('O').
    Full(Tuple),
}

impl OldTuple {
    /// The values, whichever kind.
    pub fn values(&self) -> &Tuple {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}

/// A decoded pgoutput message. `xid` fields on row-level messages are
/// `Some` only inside a streamed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage {
    /// A transaction begins.
    Begin {
        /// The LSN of the commit record.
        final_lsn: Lsn,
        /// The commit time.
        commit_timestamp: PgTimestamp,
        /// The transaction id.
        xid: u32,
    },
    /// A transaction committed.
    Commit {
        /// Flags (currently unused by Postgres).
        flags: u8,
        /// The LSN of the commit record.
        commit_lsn: Lsn,
        /// The LSN just past the commit record.
        end_lsn: Lsn,
        /// The commit time.
        commit_timestamp: PgTimestamp,
    },
    /// The transaction came from another replication origin.
    Origin {
        /// The commit LSN on the origin server.
        lsn: Lsn,
        /// The origin's name.
        name: String,
    },
    /// A table's schema, sent before its first change and after changes.
    Relation {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// The table OID.
        oid: u32,
        /// The schema name.
        namespace: String,
        /// The table name.
        name: String,
        /// The replica identity setting (`d`, `n`, `f` or `i`).
        replica_identity: u8,
        /// The columns in table order.
        columns: Vec<RelationColumn>,
    },
    /// A non-builtin type used by a following Relation.
    Type {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// The type OID.
        oid: u32,
        /// The type's schema.
        namespace: String,
        /// The type's name.
        name: String,
    },
    /// A row was inserted.
    Insert {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// The table OID.
        relation: u32,
        /// The new row.
        new: Tuple,
    },
    /// A row was updated.
    Update {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// The table OID.
        relation: u32,
        /// The old row, when the server sent one.
        old: Option<OldTuple>,
        /// The new row.
        new: Tuple,
    },
    /// A row was deleted.
    Delete {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// The table OID.
        relation: u32,
        /// The old row (key or full).
        old: OldTuple,
    },
    /// Tables were truncated.
    Truncate {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
        options: u8,
        /// The truncated tables.
        relations: Vec<u32>,
    },
    /// A `pg_logical_emit_message` message.
    Message {
        /// The (sub)transaction id inside a streamed transaction.
        xid: Option<u32>,
        /// Whether the message is transactional.
        transactional: bool,
        /// The LSN of the message.
        lsn: Lsn,
        /// The prefix given by the emitter.
        prefix: String,
        /// The content.
        content: Bytes,
    },
    /// A chunk of an in-progress transaction begins.
    StreamStart {
        /// The top-level transaction id.
        xid: u32,
        /// Whether this is the transaction's first chunk.
        first_segment: bool,
    },
    /// A chunk of an in-progress transaction ends.
    StreamStop,
    /// A streamed transaction committed.
    StreamCommit {
        /// The top-level transaction id.
        xid: u32,
        /// Flags (currently unused).
        flags: u8,
        /// The LSN of the commit record.
        commit_lsn: Lsn,
        /// The LSN just past the commit record.
        end_lsn: Lsn,
        /// The commit time.
        commit_timestamp: PgTimestamp,
    },
    /// A streamed (sub)transaction aborted.
    StreamAbort {
        /// The top-level transaction id.
        xid: u32,
        /// The aborted subtransaction; equal to `xid` when the whole
        /// transaction aborted.
        subxid: u32,
    },
}

/// Decodes pgoutput messages, tracking whether a stream chunk is open.
#[derive(Debug, Default)]
pub struct Decoder {
    in_stream: bool,
}

impl Decoder {
    /// A decoder outside any stream chunk.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes one message. The stream state changes only when the message
    /// decoded completely.
    pub fn decode(&mut self, data: Bytes) -> Result<LogicalMessage, DecodeError> {
        let Some(&tag) = data.first() else {
            return Err(DecodeError::Empty);
        };
        let mut r = Reader {
            buf: data.slice(1..),
            tag: tag as char,
        };
        let streamed = self.in_stream;
        let message = match tag {
            b'B' => LogicalMessage::Begin {
                final_lsn: r.lsn("final_lsn")?,
                commit_timestamp: r.i64("commit_timestamp")?,
                xid: r.u32("xid")?,
            },
            b'C' => LogicalMessage::Commit {
                flags: r.u8("flags")?,
                commit_lsn: r.lsn("commit_lsn")?,
                end_lsn: r.lsn("end_lsn")?,
                commit_timestamp: r.i64("commit_timestamp")?,
            },
            b'O' => LogicalMessage::Origin {
                lsn: r.lsn("lsn")?,
                name: r.cstr("name")?,
            },
            b'R' => {
                let xid = r.stream_xid(streamed)?;
                let oid = r.u32("oid")?;
                let namespace = r.cstr("namespace")?;
                let name = r.cstr("name")?;
                let replica_identity = r.u8("replica_identity")?;
                let count = r.i16("column_count")?;
                let mut columns = Vec::with_capacity(count.clamp(0, 1600) as usize);
                for _ in 0..count.max(0) {
                    let flags = r.u8("column flags")?;
                    columns.push(RelationColumn {
                        is_key: flags & 1 == 1,
                        name: r.cstr("column name")?,
                        type_oid: r.u32("column type")?,
                        type_modifier: r.i32("column type modifier")?,
                    });
                }
                LogicalMessage::Relation {
                    xid,
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                }
            }
            b'Y' => LogicalMessage::Type {
                xid: r.stream_xid(streamed)?,
                oid: r.u32("oid")?,
                namespace: r.cstr("namespace")?,
                name: r.cstr("name")?,
            },
            b'I' => {
                let xid = r.stream_xid(streamed)?;
                let relation = r.u32("relation")?;
                r.expect(b'N', "new tuple marker")?;
                LogicalMessage::Insert {
                    xid,
                    relation,
                    new: r.tuple()?,
                }
            }
            b'U' => {
                let xid = r.stream_xid(streamed)?;
                let relation = r.u32("relation")?;
                let old = match r.u8("tuple marker")? {
                    b'K' => Some(OldTuple::Key(r.tuple()?)),
                    b'O' => Some(OldTuple::Full(r.tuple()?)),
                    b'N' => None,
                    value => {
                        return Err(DecodeError::Invalid {
                            tag: 'U',
                            field: "tuple marker",
                            value,
                        });
                    }
                };
                if old.is_some() {
                    r.expect(b'N', "new tuple marker")?;
                }
                LogicalMessage::Update {
                    xid,
                    relation,
                    old,
                    new: r.tuple()?,
                }
            }
            b'D' => {
                let xid = r.stream_xid(streamed)?;
                let relation = r.u32("relation")?;
                let old = match r.u8("tuple marker")? {
                    b'K' => OldTuple::Key(r.tuple()?),
                    b'O' => OldTuple::Full(r.tuple()?),
                    value => {
                        return Err(DecodeError::Invalid {
                            tag: 'D',
                            field: "tuple marker",
                            value,
                        });
                    }
                };
                LogicalMessage::Delete { xid, relation, old }
            }
            b'T' => {
                let xid = r.stream_xid(streamed)?;
                let count = r.u32("relation count")?;
                let options = r.u8("options")?;
                let mut relations = Vec::with_capacity((count as usize).min(r.buf.len() / 4));
                for _ in 0..count {
                    relations.push(r.u32("relation")?);
                }
                LogicalMessage::Truncate {
                    xid,
                    options,
                    relations,
                }
            }
            b'M' => {
                let xid = r.stream_xid(streamed)?;
                let flags = r.u8("flags")?;
                let lsn = r.lsn("lsn")?;
                let prefix = r.cstr("prefix")?;
                let len = r.u32("content length")? as usize;
                LogicalMessage::Message {
                    xid,
                    transactional: flags & 1 == 1,
                    lsn,
                    prefix,
                    content: r.bytes(len, "content")?,
                }
            }
            b'S' => LogicalMessage::StreamStart {
                xid: r.u32("xid")?,
                first_segment: r.u8("first_segment")? == 1,
            },
            b'E' => LogicalMessage::StreamStop,
            b'c' => LogicalMessage::StreamCommit {
                xid: r.u32("xid")?,
                flags: r.u8("flags")?,
                commit_lsn: r.lsn("commit_lsn")?,
                end_lsn: r.lsn("end_lsn")?,
                commit_timestamp: r.i64("commit_timestamp")?,
            },
            // Protocol v4 appends abort_lsn and abort_time; they are not
            // needed, so trailing bytes are allowed.
            b'A' => LogicalMessage::StreamAbort {
                xid: r.u32("xid")?,
                subxid: r.u32("subxid")?,
            },
            other => return Err(DecodeError::UnknownTag(other)),
        };
        match message {
            LogicalMessage::StreamStart { .. } => self.in_stream = true,
            LogicalMessage::StreamStop => self.in_stream = false,
            _ => {}
        }
        Ok(message)
    }
}

struct Reader {
    buf: Bytes,
    tag: char,
}

impl Reader {
    fn need(&self, n: usize, field: &'static str) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            Err(DecodeError::Truncated {
                tag: self.tag,
                field,
            })
        } else {
            Ok(())
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.need(1, field)?;
        Ok(self.buf.get_u8())
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        self.need(2, field)?;
        Ok(self.buf.get_i16())
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.need(4, field)?;
        Ok(self.buf.get_u32())
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.need(4, field)?;
        Ok(self.buf.get_i32())
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.need(8, field)?;
        Ok(self.buf.get_i64())
    }

    fn lsn(&mut self, field: &'static str) -> Result<Lsn, DecodeError> {
        self.need(8, field)?;
        Ok(Lsn(self.buf.get_u64()))
    }

    fn bytes(&mut self, len: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        self.need(len, field)?;
        Ok(self.buf.split_to(len))
    }

    fn cstr(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Truncated {
                tag: self.tag,
                field,
            })?;
        let raw = self.buf.split_to(end);
        self.buf.advance(1);
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::NotUtf8 {
            tag: self.tag,
            field,
        })
    }

    fn expect(&mut self, byte: u8, field: &'static str) -> Result<(), DecodeError> {
        let value = self.u8(field)?;
        if value == byte {
            Ok(())
        } else {
            Err(DecodeError::Invalid {
                tag: self.tag,
                field,
                value,
            })
        }
    }

    fn stream_xid(&mut self, streamed: bool) -> Result<Option<u32>, DecodeError> {
        if streamed {
            Ok(Some(self.u32("xid")?))
        } else {
            Ok(None)
        }
    }

    fn tuple(&mut self) -> Result<Tuple, DecodeError> {
        let count = self.i16("tuple column count")?;
        let mut values = Vec::with_capacity(count.clamp(0, 1600) as usize);
        for _ in 0..count.max(0) {
            let value = match self.u8("tuple value kind")? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::UnchangedToast,
                kind @ (b't' | b'b') => {
                    let len = self.i32("tuple value length")?;
                    let len = usize::try_from(len).map_err(|_| DecodeError::Invalid {
                        tag: self.tag,
                        field: "tuple value length",
                        value: 0xff,
                    })?;
                    let data = self.bytes(len, "tuple value")?;
                    if kind == b't' {
                        TupleValue::Text(data)
                    } else {
                        TupleValue::Binary(data)
                    }
                }
                value => {
                    return Err(DecodeError::Invalid {
                        tag: self.tag,
                        field: "tuple value kind",
                        value,
                    });
                }
            };
            values.push(value);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn tuple_bytes(out: &mut Vec<u8>, values: &[Option<&str>]) {
        out.put_i16(values.len() as i16);
        for v in values {
            match v {
                None => out.put_u8(b'n'),
                Some("\u{0}toast") => out.put_u8(b'u'),
                Some(s) => {
                    out.put_u8(b't');
                    out.put_i32(s.len() as i32);
                    out.put_slice(s.as_bytes());
                }
            }
        }
    }

    fn samples() -> Vec<(bool, Vec<u8>)> {
        let mut v = Vec::new();
        let mut m = vec![b'B'];
        m.put_u64(0x16_B374_D848);
        m.put_i64(1234);
        m.put_u32(77);
        v.push((false, m));
        let mut m = vec![b'C', 0];
        m.put_u64(10);
        m.put_u64(20);
        m.put_i64(30);
        v.push((false, m));
        let mut m = vec![b'O'];
        m.put_u64(5);
        m.put_slice(b"origin\0");
        v.push((false, m));
        let mut m = vec![b'R'];
        m.put_u32(16384);
        m.put_slice(b"public\0orders\0");
        m.put_u8(b'd');
        m.put_i16(2);
        m.put_u8(1);
        m.put_slice(b"id\0");
        m.put_u32(23);
        m.put_i32(-1);
        m.put_u8(0);
        m.put_slice(b"note\0");
        m.put_u32(25);
        m.put_i32(-1);
        v.push((false, m));
        let mut m = vec![b'Y'];
        m.put_u32(90000);
        m.put_slice(b"public\0mood\0");
        v.push((false, m));
        let mut m = vec![b'I'];
        m.put_u32(16384);
        m.put_u8(b'N');
        tuple_bytes(&mut m, &[Some("1"), None]);
        v.push((false, m));
        let mut m = vec![b'U'];
        m.put_u32(16384);
        m.put_u8(b'O');
        tuple_bytes(&mut m, &[Some("1"), Some("old")]);
        m.put_u8(b'N');
        tuple_bytes(&mut m, &[Some("1"), Some("\u{0}toast")]);
        v.push((false, m));
        let mut m = vec![b'U'];
        m.put_u32(16384);
        m.put_u8(b'N');
        tuple_bytes(&mut m, &[Some("2"), Some("x")]);
        v.push((false, m));
        let mut m = vec![b'D'];
        m.put_u32(16384);
        m.put_u8(b'K');
        tuple_bytes(&mut m, &[Some("1"), None]);
        v.push((false, m));
        let mut m = vec![b'T'];
        m.put_u32(2);
        m.put_u8(1);
        m.put_u32(1);
        m.put_u32(2);
        v.push((false, m));
        let mut m = vec![b'M', 1];
        m.put_u64(99);
        m.put_slice(b"weft.heartbeat\0");
        m.put_u32(3);
        m.put_slice(b"abc");
        v.push((false, m));
        let mut m = vec![b'S'];
        m.put_u32(700);
        m.put_u8(1);
        v.push((false, m));
        // A streamed insert carries the xid prefix.
        let mut m = vec![b'I'];
        m.put_u32(701);
        m.put_u32(16384);
        m.put_u8(b'N');
        tuple_bytes(&mut m, &[Some("3"), Some("s")]);
        v.push((true, m));
        v.push((true, vec![b'E']));
        let mut m = vec![b'c'];
        m.put_u32(700);
        m.put_u8(0);
        m.put_u64(40);
        m.put_u64(50);
        m.put_i64(60);
        v.push((false, m));
        let mut m = vec![b'A'];
        m.put_u32(700);
        m.put_u32(701);
        v.push((false, m));
        v
    }

    #[test]
    fn decodes_every_message_type() {
        let mut decoder = Decoder::new();
        let decoded: Vec<LogicalMessage> = samples()
            .into_iter()
            .map(|(_, m)| decoder.decode(Bytes::from(m)).unwrap())
            .collect();
        assert_eq!(
            decoded[0],
            LogicalMessage::Begin {
                final_lsn: Lsn(0x16_B374_D848),
                commit_timestamp: 1234,
                xid: 77
            }
        );
        let LogicalMessage::Relation { columns, .. } = &decoded[3] else {
            panic!("not a relation: {:?}", decoded[3]);
        };
        assert!(columns[0].is_key && !columns[1].is_key);
        assert_eq!(columns[1].type_oid, 25);
        let LogicalMessage::Update { old, new, .. } = &decoded[6] else {
            panic!()
        };
        assert!(matches!(old, Some(OldTuple::Full(_))));
        assert_eq!(new[1], TupleValue::UnchangedToast);
        assert!(matches!(
            decoded[7],
            LogicalMessage::Update { old: None, .. }
        ));
        assert_eq!(
            decoded[12],
            LogicalMessage::Insert {
                xid: Some(701),
                relation: 16384,
                new: vec![
                    TupleValue::Text(Bytes::from_static(b"3")),
                    TupleValue::Text(Bytes::from_static(b"s"))
                ]
            }
        );
        assert_eq!(
            decoded[15],
            LogicalMessage::StreamAbort {
                xid: 700,
                subxid: 701
            }
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for (streamed, message) in samples() {
            for len in 0..message.len() {
                let mut decoder = Decoder {
                    in_stream: streamed,
                };
                let result = decoder.decode(Bytes::copy_from_slice(&message[..len]));
                // Stream Stop is a single byte: only the empty prefix fails.
                assert!(
                    result.is_err(),
                    "prefix {len} of {message:?} decoded as {result:?}"
                );
            }
        }
    }

    /// A seeded random-mutation fuzz: flipped bytes, overwritten length and
    /// count fields, spliced messages. Every result is a value or an error;
    /// a panic fails the test, and a hang would time it out.
    #[test]
    fn mutated_messages_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let samples = samples();
        for _ in 0..20_000 {
            let (streamed, base) = &samples[rng.random_range(0..samples.len())];
            let mut message = base.clone();
            for _ in 0..rng.random_range(1..4) {
                match rng.random_range(0..4) {
                    0 if !message.is_empty() => {
                        let at = rng.random_range(0..message.len());
                        message[at] = rng.random();
                    }
                    1 if message.len() >= 5 => {
                        // A length or count field set to something huge.
                        let at = rng.random_range(1..message.len() - 3);
                        message[at..at + 4].copy_from_slice(&rng.random::<u32>().to_be_bytes());
                    }
                    2 => {
                        let (_, other) = &samples[rng.random_range(0..samples.len())];
                        message.extend_from_slice(&other[rng.random_range(0..other.len())..]);
                    }
                    _ => {
                        let keep = rng.random_range(0..=message.len());
                        message.truncate(keep);
                    }
                }
            }
            let mut decoder = Decoder {
                in_stream: *streamed,
            };
            let _ = decoder.decode(Bytes::from(message));
        }
    }

    #[test]
    fn rejects_garbage_bytes() {
        let mut decoder = Decoder::new();
        assert!(matches!(
            decoder.decode(Bytes::from_static(b"Z")),
            Err(DecodeError::UnknownTag(b'Z'))
        ));
        let mut m = vec![b'I'];
        m.put_u32(1);
        m.put_u8(b'N');
        m.put_i16(1);
        m.put_u8(b't');
        m.put_i32(-5);
        assert!(decoder.decode(Bytes::from(m)).is_err());
        let mut m = vec![b'D'];
        m.put_u32(1);
        m.put_u8(b'X');
        assert!(decoder.decode(Bytes::from(m)).is_err());
    }
}
