//! A [`Message`]'s JSON written directly: byte for byte what
//! `serde_json::to_writer` writes for it, at a fraction of the cost.
//!
//! A sink without a transform renders every message it stores, and a
//! backfill stores millions. serde's generic path spent most of that
//! scanning every key and value for characters to escape, one byte at a
//! time, and rendering the metadata texts that a chunk's messages all share
//! (their table, commit time, database and consumer) once per message
//! (BENCHMARKS.md, "Twelfth round"). Here keys are literals, texts without
//! such characters are copied as they are, and the shared metadata is
//! rendered once per run of messages that share it ([`JsonCache`]).

use std::sync::Arc;

use serde_json::Value;

use super::{Message, Metadata, Record};
use crate::change::Row;

/// The pieces of metadata JSON that consecutive messages share, rendered
/// once. Holding the texts they were rendered from keeps a piece from
/// being mistaken for another's: an `Arc` is only compared by address while
/// it is alive.
#[derive(Debug, Default)]
pub struct JsonCache {
    /// From `"metadata":{` to `"commit_idx":`.
    head: Fragment,
    /// `,"database_name":…,"transaction_annotations":`.
    database: Fragment,
    /// `,"consumer":{…}}`, which closes the metadata.
    consumer: Fragment,
}

/// A piece of JSON and the shared texts (and number) it was rendered from.
#[derive(Debug, Default)]
struct Fragment {
    rendered: bool,
    texts: Vec<Arc<str>>,
    number: u64,
    json: String,
}

impl Fragment {
    /// The piece for `texts` and `number`: the one kept when it was
    /// rendered from these very texts, else rendered by `render` now.
    fn get(&mut self, texts: &[&Arc<str>], number: u64, render: impl FnOnce(&mut String)) -> &str {
        let same = self.rendered
            && self.number == number
            && self.texts.len() == texts.len()
            && self.texts.iter().zip(texts).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            self.texts.clear();
            self.texts.extend(texts.iter().map(|text| Arc::clone(text)));
            self.number = number;
            self.json.clear();
            render(&mut self.json);
            self.rendered = true;
        }
        &self.json
    }
}

/// Appends `message`'s JSON to `out`, as `serde_json::to_writer` would.
pub fn write_message(out: &mut String, message: &Message, cache: &mut JsonCache) {
    out.push_str("{\"record\":");
    match &message.record {
        Record::Map(row) => write_row(out, row),
        Record::Json(json) => out.push_str(json),
    }
    out.push_str(",\"changes\":");
    match &message.changes {
        Some(changes) => write_row(out, changes),
        None => out.push_str("null"),
    }
    out.push_str(",\"action\":\"");
    out.push_str(message.action.as_str());
    out.push_str("\",");
    write_metadata(out, &message.metadata, cache);
    out.push('}');
}

/// Appends `"metadata":{…}`.
fn write_metadata(out: &mut String, metadata: &Metadata, cache: &mut JsonCache) {
    let texts = [
        &metadata.table_schema,
        &metadata.table_name,
        &metadata.commit_timestamp,
    ];
    out.push_str(cache.head.get(&texts, metadata.commit_lsn.0, |json| {
        json.push_str("\"metadata\":{\"table_schema\":");
        write_str(json, &metadata.table_schema);
        json.push_str(",\"table_name\":");
        write_str(json, &metadata.table_name);
        json.push_str(",\"commit_timestamp\":");
        write_str(json, &metadata.commit_timestamp);
        json.push_str(",\"commit_lsn\":");
        write_integer(json, metadata.commit_lsn.0);
        json.push_str(",\"commit_idx\":");
    }));
    write_integer(out, metadata.commit_idx.into());
    out.push_str(",\"idempotency_key\":");
    write_str(out, &metadata.idempotency_key);
    out.push_str(",\"record_pks\":");
    write_sequence(out, ['[', ']'], &metadata.record_pks, |out, value| {
        write_str(out, value)
    });
    out.push_str(cache.database.get(&[&metadata.database_name], 0, |json| {
        json.push_str(",\"database_name\":");
        write_str(json, &metadata.database_name);
        json.push_str(",\"transaction_annotations\":");
    }));
    write_optional(out, metadata.transaction_annotations.as_ref());
    if let Some(enrichment) = &metadata.enrichment {
        out.push_str(",\"enrichment\":");
        write_value(out, enrichment);
    }
    if let Some(source) = &metadata.webhook_source {
        out.push_str(",\"webhook_source\":");
        write_str(out, source);
    }
    let consumer = &metadata.consumer;
    out.push_str(
        cache
            .consumer
            .get(&[&consumer.id, &consumer.name], 0, |json| {
                json.push_str(",\"consumer\":{\"id\":");
                write_str(json, &consumer.id);
                json.push_str(",\"name\":");
                write_str(json, &consumer.name);
                json.push_str("}}");
            }),
    );
}

/// Appends `value`, or `null`.
fn write_optional(out: &mut String, value: Option<&Value>) {
    match value {
        Some(value) => write_value(out, value),
        None => out.push_str("null"),
    }
}

/// Appends a row (or any JSON object) in its keys' order.
fn write_row(out: &mut String, row: &Row) {
    write_sequence(out, ['{', '}'], row, |out, (key, value)| {
        write_str(out, key);
        out.push(':');
        write_value(out, value);
    });
}

/// Appends `items` between the two `brackets`, separated by commas.
fn write_sequence<T>(
    out: &mut String,
    brackets: [char; 2],
    items: impl IntoIterator<Item = T>,
    mut write_item: impl FnMut(&mut String, T),
) {
    out.push(brackets[0]);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_item(out, item);
    }
    out.push(brackets[1]);
}

/// Appends `value` in compact form.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // Numbers keep Postgres's text (`arbitrary_precision`), which is
        // what serde_json writes too.
        Value::Number(number) => out.push_str(number.as_str()),
        Value::String(text) => write_str(out, text),
        Value::Array(items) => write_sequence(out, ['[', ']'], items, write_value),
        Value::Object(object) => write_row(out, object),
    }
}

/// Appends `number` in decimal.
fn write_integer(out: &mut String, number: u64) {
    out.push_str(itoa::Buffer::new().format(number));
}

/// Appends `text` as a JSON string: copied as it is when nothing in it
/// needs escaping (nearly always), else escaped by serde_json.
pub fn write_str(out: &mut String, text: &str) {
    if is_plain(text.as_bytes()) {
        out.reserve(text.len() + 2);
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(text).expect("a string always serialises"));
    }
}

/// Whether `bytes` holds nothing JSON escapes: no control character
/// (below 0x20), `"` or `\`, exactly serde_json's set.
pub fn is_plain(bytes: &[u8]) -> bool {
    let len = bytes.len();
    // Short texts (most values and keys) in one or two overlapping word
    // loads instead of byte by byte. Loads, not a copy into a padded
    // buffer: reading back bytes just stored stalls the CPU more than the
    // byte loop costs.
    match len {
        0..4 => !bytes.iter().any(|&b| escapes(b)),
        4..8 => {
            let word =
                |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
            !word_escapes(u64::from(word(0)) | u64::from(word(len - 4)) << 32)
        }
        8..16 => {
            let word =
                |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            !word_escapes(word(0)) && !word_escapes(word(len - 8))
        }
        _ => {
            let mut chunks = bytes.chunks_exact(16);
            if chunks.any(|chunk| any_escapes(chunk.try_into().expect("chunks of 16"))) {
                return false;
            }
            // The rest within the last sixteen bytes, some checked twice.
            chunks.remainder().is_empty()
                || !any_escapes(bytes[len - 16..].try_into().expect("16 bytes"))
        }
    }
}

/// Whether any of sixteen bytes is escaped, with no early exit inside,
/// which the compiler turns into vector compares.
fn any_escapes(chunk: &[u8; 16]) -> bool {
    chunk.iter().fold(false, |found, &b| found | escapes(b))
}

/// Whether any byte of `word` is escaped: the bit tricks that find a byte
/// below a bound, or a zero byte, in a word ("Bit Twiddling Hacks",
/// `hasless` and `haszero`; exact for whether there is one at all).
fn word_escapes(word: u64) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let control = below(word, 0x20);
    let quote = below(word ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
    control | quote | backslash != 0
}

/// Whether JSON escapes the byte `b`.
const fn escapes(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::change::Action;
    use crate::lsn::Lsn;
    use crate::message::ConsumerRef;

    fn row(value: Value) -> Row {
        match value {
            Value::Object(row) => row,
            _ => panic!("a row is an object"),
        }
    }

    fn message(schema: &str, name: &str, lsn: u64, record: Row) -> Message {
        Message {
            record: record.into(),
            changes: None,
            action: Action::Read,
            metadata: Metadata {
                table_schema: schema.into(),
                table_name: name.into(),
                commit_timestamp: "2026-12-04T18:00:00.123456Z".into(),
                commit_lsn: Lsn(lsn),
                commit_idx: 7,
                idempotency_key: "b1:42".into(),
                record_pks: vec!["42".into()],
                database_name: "source".into(),
                transaction_annotations: None,
                enrichment: None,
                webhook_source: None,
                consumer: ConsumerRef::for_sink("orders"),
            },
        }
    }

    fn written(message: &Message, cache: &mut JsonCache) -> String {
        let mut out = String::new();
        write_message(&mut out, message, cache);
        out
    }

    /// Texts that serde_json escapes, and some it leaves alone, at every
    /// place of a 16-byte block and in its remainder.
    fn awkward_texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "plain",
            "quote \" inside",
            "back\\slash",
            "tab\there",
            "nul \u{0} and \u{1f}",
            "del \u{7f} stays",
            "ünïcödé ✓ 🦀",
            "\u{2028} line separator",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        for at in 0..40 {
            let mut text = "x".repeat(40);
            text.replace_range(at..at + 1, "\"");
            texts.push(text.clone());
            text.replace_range(at..at + 1, "\n");
            texts.push(text);
        }
        texts
    }

    #[test]
    fn messages_are_written_exactly_as_serde_json_writes_them() {
        let mut cache = JsonCache::default();
        for (i, text) in awkward_texts().into_iter().enumerate() {
            let mut record = row(json!({
                "id": 42,
                "price": "12.50",
                "amount": serde_json::from_str::<Value>("1234567890123456789012.000001").unwrap(),
                "ratio": -1.5e-7,
                "flag": i % 2 == 0,
                "gone": null,
                "doc": {"a": [1, "two", {"three": null}], "": []},
                "tags": ["x", text.clone()],
            }));
            record.insert(text.clone(), Value::String(text.clone()));
            let mut message = message(&text, "orders", 1000 + i as u64, record.clone());
            message.action = [Action::Insert, Action::Update, Action::Delete, Action::Read][i % 4];
            message.changes = (i % 3 == 0).then(|| row(json!({"status": text.clone()})));
            message.metadata.idempotency_key = text.clone();
            message.metadata.record_pks = vec![text.clone(), "7".into()];
            message.metadata.transaction_annotations = (i % 5 == 0).then(|| json!({"by": text}));
            message.metadata.enrichment = (i % 2 == 1).then(|| json!({"customer": {"tier": text}}));
            message.metadata.webhook_source = (i % 7 == 0).then(|| text.clone());
            message.metadata.database_name = text.as_str().into();
            message.metadata.consumer = ConsumerRef::for_sink(&text);
            let expected = serde_json::to_string(&message).unwrap();
            assert_eq!(written(&message, &mut cache), expected, "text {text:?}");
        }
    }

    #[test]
    fn shared_metadata_is_rendered_again_when_it_changes() {
        let mut cache = JsonCache::default();
        let first = message("public", "orders", 10, row(json!({"id": 1})));
        let mut same_texts = first.clone();
        same_texts.metadata.commit_idx = 8;
        let mut next_chunk = first.clone();
        next_chunk.metadata.commit_lsn = Lsn(11);
        let other_table = message("sales", "refunds", 10, row(json!({"id": 2})));
        let mut other_consumer = first.clone();
        other_consumer.metadata.consumer = ConsumerRef::for_sink("refunds");
        other_consumer.metadata.database_name = "replica".into();
        for message in [
            &first,
            &same_texts,
            &next_chunk,
            &other_table,
            &first,
            &other_consumer,
            &first,
        ] {
            let expected = serde_json::to_string(message).unwrap();
            assert_eq!(written(message, &mut cache), expected);
        }
    }

    #[test]
    fn only_control_characters_quotes_and_backslashes_need_escaping() {
        for b in 0..=255u8 {
            let escaped = serde_json::to_string(&char::from(b).to_string()).unwrap();
            let plain = format!("\"{}\"", char::from(b));
            assert_eq!(escapes(b), escaped != plain, "byte {b:#x}");
        }
    }

    #[test]
    fn an_escaped_byte_is_found_at_any_length_and_position() {
        // Around every byte that escapes, bytes that do not: next to the
        // bounds (0x20, 0x21, 0x23, 0x5b, 0x5d) and above 0x7f (UTF-8).
        let fillers = [
            b'n', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
        ];
        for len in 0..=49 {
            for filler in fillers {
                let text = vec![filler; len];
                assert!(is_plain(&text), "length {len} of {filler:#x}");
                for at in 0..len {
                    for escaped in [0x00, 0x01, 0x1f, b'"', b'\\'] {
                        let mut text = text.clone();
                        text[at] = escaped;
                        assert!(
                            !is_plain(&text),
                            "{escaped:#x} at {at} of {len} {filler:#x}"
                        );
                    }
                }
            }
        }
    }
}
