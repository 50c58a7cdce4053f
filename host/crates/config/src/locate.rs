//! Finding where a path points in the YAML text, for problems found after
//! parsing (cross-references, destination settings).
//!
//! serde_yaml_ng does not expose node positions, but it stamps the position
//! of the node being read on any error raised while reading it. So the
//! locator walks the document down the path and raises an error at the
//! deepest node it reaches; the error's location is the answer.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::Location;
use super::path::{DocPath, Step};

/// The line and column of the node at `path`, or of its deepest existing
/// ancestor when the path goes further than the document does.
pub(crate) fn locate(text: &str, path: &DocPath) -> Option<Location> {
    let probe = Probe {
        steps: path.steps(),
    };
    let error = probe
        .deserialize(serde_yaml_ng::Deserializer::from_str(text))
        .err()?;
    error.location().map(|l| Location {
        line: l.line(),
        column: l.column(),
    })
}

/// Raised at the target node; its text is never shown.
const FOUND: &str = "weft-config-locate-found";

struct Probe<'a> {
    steps: &'a [Step],
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(wanted), rest)) = self.steps.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        while let Some(key) = map.next_key::<serde_yaml_ng::Value>()? {
            if key.as_str() == Some(wanted.as_str()) {
                return map.next_value_seed(Probe { steps: rest });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom(FOUND))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(wanted), rest)) = self.steps.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut index = 0;
        while index < *wanted {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom(FOUND));
            }
            index += 1;
        }
        match seq.next_element_seed(Probe { steps: rest })? {
            Some(()) => Ok(()),
            None => Err(de::Error::custom(FOUND)),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(FOUND))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
databases:
  - name: main
    url: postgres://localhost/db
sinks:
  - name: a
    transform: up
  - name: b
    destination:
      type: kafka
";

    fn at(path: DocPath) -> (usize, usize) {
        let l = locate(TEXT, &path).expect("located");
        (l.line, l.column)
    }

    #[test]
    fn finds_scalars_in_nested_mappings_and_sequences() {
        let sinks = DocPath::root().key("sinks");
        assert_eq!(at(sinks.index(0).key("transform")), (6, 16));
        assert_eq!(at(sinks.index(1).key("destination").key("type")), (9, 13));
        assert_eq!(
            at(DocPath::root().key("databases").index(0).key("url")),
            (3, 10)
        );
    }

    #[test]
    fn missing_tail_points_at_deepest_existing_node() {
        let sink = DocPath::root().key("sinks").index(1);
        let (line, _) = at(sink.key("destination").key("ack_wait_ms"));
        assert!((8..=9).contains(&line), "line {line}");
    }
}
