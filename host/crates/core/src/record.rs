//! A message's `record`: the row's values as a map, or as JSON a backfill's
//! runner already wrote.
//!
//! A backfill turns millions of rows into messages. Building each as a map
//! (a key and a value allocated per column) only to write it out as JSON
//! again was most of a read row's cost in the pipeline (BENCHMARKS.md,
//! issue 8), so a read row travels as its JSON text and is copied into the
//! stored message as it is. Anything that needs the values parses it.

use std::borrow::Cow;
use std::ops::{Deref, Range};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A row's values as JSON, in column order, each rendered as Postgres's
/// `to_jsonb()` renders it with `TimeZone = 'UTC'`.
pub type Row = serde_json::Map<String, serde_json::Value>;

/// A message's `record`.
#[derive(Debug, Clone)]
pub enum Record {
    /// The values as a map: a change from the stream, or a function's output.
    Map(Row),
    /// A JSON object written straight from Postgres's text by a backfill's
    /// runner, in the table's column order (as a map would be written).
    /// weft wrote it, so it is trusted to be JSON and not parsed again.
    Json(WrittenJson),
}

/// A JSON object a backfill's runner wrote: its slice of the text the
/// runner wrote its whole chunk into. One allocation per chunk, not per
/// row: each row's own, allocated by the runner and freed by the pipeline
/// on another thread, cost mimalloc's slow cross-thread free per row.
#[derive(Clone)]
pub struct WrittenJson {
    chunk: Arc<String>,
    range: Range<usize>,
}

impl WrittenJson {
    /// The object at `range` of `chunk`'s text.
    ///
    /// # Panics
    /// If `range` is not a slice of the text on character boundaries.
    pub fn new(chunk: Arc<String>, range: Range<usize>) -> WrittenJson {
        assert!(
            chunk.get(range.clone()).is_some(),
            "a written record is a slice of its chunk's text"
        );
        WrittenJson { chunk, range }
    }
}

impl Deref for WrittenJson {
    type Target = str;

    fn deref(&self) -> &str {
        &self.chunk[self.range.clone()]
    }
}

impl std::fmt::Debug for WrittenJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// A text as a chunk of its own.
impl From<String> for WrittenJson {
    fn from(text: String) -> WrittenJson {
        let range = 0..text.len();
        WrittenJson::new(Arc::new(text), range)
    }
}

/// A text as a chunk of its own.
impl From<&str> for WrittenJson {
    fn from(text: &str) -> WrittenJson {
        text.to_string().into()
    }
}

impl Record {
    /// The values as a map; a written record is parsed (it is always an
    /// object: only the backfill writes one).
    pub fn to_map(&self) -> Cow<'_, Row> {
        match self {
            Record::Map(row) => Cow::Borrowed(row),
            Record::Json(json) => Cow::Owned(Record::parse_written(json)),
        }
    }

    /// The values as a map to change; a written record becomes a map.
    pub fn to_mut(&mut self) -> &mut Row {
        if let Record::Json(_) = self {
            *self = Record::Map(self.to_map().into_owned());
        }
        match self {
            Record::Map(row) => row,
            Record::Json(_) => unreachable!("made a map above"),
        }
    }

    /// The values of a JSON object weft wrote (a backfill's read row).
    pub fn parse_written(json: &str) -> Row {
        serde_json::from_str(json).expect("a written record is a JSON object")
    }
}

impl Default for Record {
    fn default() -> Record {
        Record::Map(Row::new())
    }
}

impl From<Row> for Record {
    fn from(row: Row) -> Record {
        Record::Map(row)
    }
}

/// Records are equal when their values are, whichever form they take.
impl PartialEq for Record {
    fn eq(&self, other: &Record) -> bool {
        match (self, other) {
            (Record::Json(a), Record::Json(b)) => **a == **b,
            _ => self.to_map() == other.to_map(),
        }
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Record::Map(row) => row.serialize(serializer),
            Record::Json(json) => RawValue::from_string(json.to_string())
                .map_err(serde::ser::Error::custom)?
                .serialize(serializer),
        }
    }
}

/// A record read back (a held change, a dead letter) is a map.
impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Record, D::Error> {
        Row::deserialize(deserializer).map(Record::Map)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(text: &str) -> Record {
        Record::Json(text.into())
    }

    #[test]
    fn a_written_record_serialises_as_its_text_and_reads_back_as_a_map() {
        let text = r#"{"id":1,"price":12.50,"note":"a \"b\""}"#;
        let record = written(text);
        assert_eq!(serde_json::to_string(&record).unwrap(), text);
        assert_eq!(
            serde_json::to_value(&record).unwrap(),
            json!({"id": 1, "price": serde_json::from_str::<serde_json::Value>("12.50").unwrap(), "note": "a \"b\""})
        );
        let back: Record = serde_json::from_str(text).unwrap();
        assert!(matches!(back, Record::Map(_)));
        assert_eq!(back, record, "equal by value across forms");
        assert_eq!(record.to_map()["note"], "a \"b\"");
        let mut changed = record.clone();
        changed.to_mut().insert("id".into(), json!(2));
        assert_eq!(changed.to_map()["id"], 2);
        assert_ne!(changed, record);
    }

    #[test]
    fn records_written_into_one_chunk_are_each_their_own_slice() {
        let chunk = Arc::new(r#"{"id":1}{"id":2}"#.to_string());
        let first = Record::Json(WrittenJson::new(Arc::clone(&chunk), 0..8));
        let second = Record::Json(WrittenJson::new(Arc::clone(&chunk), 8..16));
        assert_eq!(serde_json::to_string(&first).unwrap(), r#"{"id":1}"#);
        assert_eq!(serde_json::to_string(&second).unwrap(), r#"{"id":2}"#);
        assert_eq!(second, written(r#"{"id":2}"#), "equal to its own text");
        assert_ne!(first, second);
        drop(chunk);
        assert_eq!(second.to_map()["id"], 2, "the records keep the chunk");
    }

    #[test]
    #[should_panic(expected = "a slice of its chunk's text")]
    fn a_written_record_must_lie_inside_its_chunk() {
        WrittenJson::new(Arc::new("{}".to_string()), 1..3);
    }

    #[test]
    fn records_differing_in_a_value_are_not_equal() {
        let map: Row = serde_json::from_str(r#"{"id":1}"#).unwrap();
        assert_ne!(written(r#"{"id":2}"#), Record::Map(map.clone()));
        assert_eq!(written(r#"{"id":1}"#), Record::Map(map));
    }
}
