//! Text-format column values → JSON, the way Postgres's `to_jsonb()` renders
//! them with `TimeZone = 'UTC'` and `DateStyle = ISO`.
//!
//! This is the one place the type mapping lives (`docs/types.md` is its
//! user-facing table). The replication session is started with
//! `DateStyle=ISO`, `IntervalStyle=postgres`, `TimeZone=UTC`,
//! `extra_float_digits=3` and `bytea_output=hex` (see `protocol.rs`), so the
//! text pgoutput sends is deterministic whatever the server's own settings
//! are; this module only reshapes that text into what `to_jsonb()` shows.
//!
//! `to_jsonb()` looks through domains to the base type, then renders:
//!
//! * `int2/4/8`, `float4/8`, `numeric` as JSON numbers printed the way
//!   `numeric` prints them (jsonb stores every number as numeric), so
//!   `1e+300` becomes `1000…0`; `NaN` and `±Infinity` as strings;
//! * `bool` as `true`/`false`;
//! * `json` and `jsonb` embedded, as jsonb (sorted keys, last duplicate wins);
//! * `timestamp` and `timestamptz` in the ISO-8601 "T" form (offsets with
//!   minutes); `date` needs nothing beyond the ISO text;
//! * true arrays (and `int2vector`/`oidvector`) as nested JSON arrays of their
//!   elements' renderings, ignoring explicit lower bounds;
//! * composite types as objects of their non-dropped attributes, each
//!   rendered by its own type, keys in jsonb order;
//! * `hstore` (extension) as an object of strings, through its jsonb cast;
//! * everything else (text types, bytea, uuid, time, timetz, interval,
//!   network, bit, geometric, text search, xml, money, ranges, multiranges,
//!   enums, OID types, user-defined base types) as the output text.
//!
//! The kinds are built by [`builtin::builtin_kind`] for built-in types and by
//! `type_catalog.rs` from `pg_type`/`pg_attribute` for the rest.

mod array;
pub mod builtin;
mod composite;
mod hstore;
mod scalar;

use std::sync::Arc;

use serde_json::Value;

use weft_core::message::json;

pub use builtin::builtin_kind;

/// How a column type renders in JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeKind {
    /// `bool`.
    Bool,
    /// Integer, float and numeric types.
    Number,
    /// `json` and `jsonb`.
    Json,
    /// `timestamp without time zone`.
    Timestamp,
    /// `timestamp with time zone`.
    Timestamptz,
    /// The output text as a JSON string.
    Text,
    /// A true array type (`int[]`, `mood[]`, ...), of any number of dimensions.
    Array(Arc<ArrayType>),
    /// `int2vector` and `oidvector`: space-separated elements, no braces.
    Vector(Arc<TypeKind>),
    /// A composite (row) type.
    Composite(Arc<CompositeType>),
    /// The `hstore` extension type, which `to_jsonb()` renders through its
    /// cast to jsonb: an object of string (or null) values.
    Hstore,
}

/// The element rendering and text delimiter of an array type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayType {
    /// How each element renders.
    pub element: TypeKind,
    /// `typdelim` of the element type: `,` for all but `box` (`;`).
    pub delimiter: char,
}

/// The attributes of a composite type, in attribute order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositeType {
    /// The composite type's OID, to refresh its definition when stale.
    pub oid: u32,
    /// The non-dropped attributes in `attnum` order.
    pub fields: Vec<CompositeField>,
    /// Indexes into `fields` in jsonb key order (shorter names first, then
    /// bytewise), the order `to_jsonb()` shows them in.
    key_order: Vec<usize>,
}

/// One attribute of a composite type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositeField {
    /// The attribute name.
    pub name: String,
    /// How its value renders.
    pub kind: TypeKind,
}

impl CompositeType {
    /// A composite type with these attributes (non-dropped, `attnum` order).
    pub fn new(oid: u32, fields: Vec<CompositeField>) -> CompositeType {
        let mut key_order: Vec<usize> = (0..fields.len()).collect();
        key_order.sort_by(|&a, &b| scalar::jsonb_key_cmp(&fields[a].name, &fields[b].name));
        CompositeType {
            oid,
            fields,
            key_order,
        }
    }
}

impl TypeKind {
    /// An array of `element` with the usual `,` delimiter.
    pub fn array_of(element: TypeKind) -> TypeKind {
        TypeKind::Array(Arc::new(ArrayType {
            element,
            delimiter: ',',
        }))
    }

    /// Whether rendering needs more than the scalar text, i.e. whether the
    /// kind contains a composite whose definition can go stale.
    pub fn has_composite(&self) -> bool {
        match self {
            TypeKind::Composite(_) => true,
            TypeKind::Array(array) => array.element.has_composite(),
            TypeKind::Vector(element) => element.has_composite(),
            _ => false,
        }
    }
}

/// A composite value whose number of fields differs from the attributes
/// weft knows for its type: the type was altered (`ALTER TYPE … ADD/DROP
/// ATTRIBUTE`) after weft read its definition. pgoutput does not announce
/// such changes, so the caller re-reads the catalog and renders again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("a value of composite type {oid} has {found} fields, the known definition {known}")]
pub struct StaleComposite {
    /// The composite type's OID.
    pub oid: u32,
    /// Fields in the value.
    pub found: usize,
    /// Attributes in the known definition.
    pub known: usize,
}

/// Renders one non-null value of `column` of `relation` given in text
/// format, delivering the text of a composite value that does not fit its
/// type's definition (and logging it) instead of failing.
pub fn render_lenient(kind: &TypeKind, text: &str, relation: &str, column: &str) -> Value {
    render(kind, text).unwrap_or_else(|stale| stale_text(&stale, text, relation, column))
}

/// Appends the JSON of one non-null value of `column` of `relation` given
/// in text format: exactly what writing [`render_lenient`]'s value gives,
/// without building the value for the kinds most columns have (text,
/// numbers, timestamps with time zone). A backfill writes its rows so.
pub fn write_json_lenient(
    kind: &TypeKind,
    text: &str,
    (relation, column): (&str, &str),
    out: &mut String,
) {
    match kind {
        TypeKind::Text => json::write_str(out, text),
        TypeKind::Number if scalar::is_number_as_printed(text) => out.push_str(text),
        TypeKind::Timestamptz => {
            let pieces = scalar::timestamptz_pieces(text);
            if pieces.iter().all(|piece| json::is_plain(piece.as_bytes())) {
                out.push('"');
                for piece in pieces {
                    out.push_str(piece);
                }
                out.push('"');
            } else {
                json::write_value(out, &scalar::timestamptz(text));
            }
        }
        _ => json::write_value(out, &render_lenient(kind, text, relation, column)),
    }
}

/// The text one non-null key value of `column` of `relation` given in text
/// format has in a message's `record_pks` and group: exactly
/// [`weft_core::change::json_key_text`] of [`render_lenient`]'s value, without
/// building the value for text and numbers printed as they render.
pub fn key_text_lenient(kind: &TypeKind, text: &str, (relation, column): (&str, &str)) -> String {
    match kind {
        TypeKind::Text => text.to_string(),
        TypeKind::Number if scalar::is_number_as_printed(text) => text.to_string(),
        _ => weft_core::change::json_key_text(&render_lenient(kind, text, relation, column)),
    }
}

/// What a composite value that does not fit its type's definition
/// (`stale`) delivers when not strict: its text, with a warning.
pub fn stale_text(stale: &StaleComposite, text: &str, relation: &str, column: &str) -> Value {
    tracing::warn!(relation, column, %stale,
        "composite value does not fit its type's definition; delivering its text");
    Value::String(text.to_string())
}

/// Renders one non-null value given in text format.
///
/// Text that does not parse as its type's syntax (which Postgres never
/// sends) renders as a string of the text rather than failing the stream.
pub fn render(kind: &TypeKind, text: &str) -> Result<Value, StaleComposite> {
    Ok(match kind {
        TypeKind::Bool => scalar::boolean(text),
        TypeKind::Number => scalar::number(text),
        TypeKind::Json => scalar::json(text),
        TypeKind::Timestamp => scalar::timestamp(text),
        TypeKind::Timestamptz => scalar::timestamptz(text),
        TypeKind::Text => Value::String(text.to_string()),
        TypeKind::Array(array) => match array::parse(text, array.delimiter) {
            Some(node) => node.render(&array.element)?,
            None => Value::String(text.to_string()),
        },
        TypeKind::Vector(element) => Value::Array(
            text.split_ascii_whitespace()
                .map(|item| render(element, item))
                .collect::<Result<_, _>>()?,
        ),
        TypeKind::Composite(composite) => match composite::parse(text) {
            Some(values) => composite::render(composite, &values)?,
            None => Value::String(text.to_string()),
        },
        TypeKind::Hstore => hstore::parse(text).unwrap_or_else(|| Value::String(text.to_string())),
    })
}

#[cfg(test)]
mod tests;
