//! Paths to a node of the config document, written as users read them:
//! `sinks[0].destination.type`.

use std::fmt;

/// One step from a node to its child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// Where a node sits in the document; empty for the document itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocPath(Vec<Step>);

impl DocPath {
    /// The document itself.
    pub fn root() -> Self {
        DocPath(Vec::new())
    }

    /// This path extended by a mapping key.
    pub fn key(&self, key: &str) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Key(key.to_owned()));
        DocPath(steps)
    }

    /// This path extended by a sequence index.
    pub fn index(&self, index: usize) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Index(index));
        DocPath(steps)
    }

    /// This path followed by `tail`.
    pub fn join(&self, tail: &DocPath) -> Self {
        let mut steps = self.0.clone();
        steps.extend(tail.0.iter().cloned());
        DocPath(steps)
    }

    /// The steps from the root.
    pub fn steps(&self) -> &[Step] {
        &self.0
    }

    /// Converts the path `serde_path_to_error` tracked while deserializing.
    pub fn from_tracked(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment;
        DocPath(
            path.iter()
                .filter_map(|segment| match segment {
                    Segment::Map { key } => Some(Step::Key(key.clone())),
                    Segment::Seq { index } => Some(Step::Index(*index)),
                    Segment::Enum { .. } | Segment::Unknown => None,
                })
                .collect(),
        )
    }
}

impl fmt::Display for DocPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, "{key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_keys_and_indexes_like_the_docs() {
        let path = DocPath::root()
            .key("sinks")
            .index(0)
            .key("destination")
            .key("type");
        assert_eq!(path.to_string(), "sinks[0].destination.type");
        assert_eq!(DocPath::root().to_string(), "");
    }
}
