//! Postgres's array output syntax: `{1,2}`, `{{"a b",NULL},{c,d}}`,
//! `[0:1]={x,y}`, `{(1,1),(0,0);(2,2),(1,1)}` (box uses `;`).
//!
//! `array_out` quotes an element when it is empty, spells `NULL`, or holds
//! a quote, backslash, brace, the delimiter or white space; inside quotes
//! `"` and `\` are backslash-escaped. An unquoted `NULL` is SQL NULL.

use serde_json::Value;

use super::{StaleComposite, TypeKind, render};

/// A parsed array value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ArrayNode {
    /// An SQL NULL element.
    Null,
    /// An element's text.
    Element(String),
    /// A dimension.
    Nested(Vec<ArrayNode>),
}

impl ArrayNode {
    /// Renders the array as nested JSON arrays of rendered elements.
    pub(super) fn render(&self, element: &TypeKind) -> Result<Value, StaleComposite> {
        Ok(match self {
            ArrayNode::Null => Value::Null,
            ArrayNode::Element(text) => render(element, text)?,
            ArrayNode::Nested(items) => Value::Array(
                items
                    .iter()
                    .map(|n| n.render(element))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}

/// Parses an array literal; `None` when `text` is not one. Explicit bounds
/// (`[0:1]=`) are skipped: `to_jsonb()` ignores them.
pub(super) fn parse(text: &str, delimiter: char) -> Option<ArrayNode> {
    let delimiter = u8::try_from(delimiter).ok()?;
    let mut text = text.trim();
    if text.starts_with('[') {
        let eq = text.find('=')?;
        text = text[eq + 1..].trim_start();
    }
    let mut parser = Parser {
        bytes: text.as_bytes(),
        pos: 0,
        delimiter,
    };
    let node = parser.level()?;
    parser.skip_spaces();
    (parser.pos == parser.bytes.len()).then_some(node)
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    delimiter: u8,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn level(&mut self) -> Option<ArrayNode> {
        if self.peek()? != b'{' {
            return None;
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_spaces();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(ArrayNode::Nested(items));
        }
        loop {
            self.skip_spaces();
            let item = match self.peek()? {
                b'{' => self.level()?,
                b'"' => ArrayNode::Element(self.quoted()?),
                _ => self.unquoted()?,
            };
            items.push(item);
            self.skip_spaces();
            match self.peek()? {
                b'}' => {
                    self.pos += 1;
                    return Some(ArrayNode::Nested(items));
                }
                b if b == self.delimiter => self.pos += 1,
                _ => return None,
            }
        }
    }

    fn quoted(&mut self) -> Option<String> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.peek()? {
                b'\\' => {
                    out.push(*self.bytes.get(self.pos + 1)?);
                    self.pos += 2;
                }
                b'"' => {
                    self.pos += 1;
                    return String::from_utf8(out).ok();
                }
                b => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
    }

    fn unquoted(&mut self) -> Option<ArrayNode> {
        let mut out = Vec::new();
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'}' => break,
                b if b == self.delimiter => break,
                b'\\' => {
                    out.push(*self.bytes.get(self.pos + 1)?);
                    escaped = true;
                    self.pos += 2;
                }
                b => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
        while out.last().is_some_and(|b| b.is_ascii_whitespace()) {
            out.pop();
        }
        if !escaped && out.eq_ignore_ascii_case(b"NULL") {
            return Some(ArrayNode::Null);
        }
        String::from_utf8(out).ok().map(ArrayNode::Element)
    }
}
