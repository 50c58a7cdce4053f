//! One message as SQS gets it: its body (text, as SQS bodies must be), its
//! attributes, its FIFO ids, and its size as SQS counts it.

use std::borrow::Cow;

use base64::Engine as _;
use md5::{Digest, Md5};
use weft_store::{StoredMessage, StoredPayload};

/// The string attribute carrying a transform's bytes payload's media type.
pub const CONTENT_TYPE_ATTRIBUTE: &str = "content_type";

/// The string attribute set to [`BASE64`] when the body is a bytes payload
/// in base64 (bytes that are not text SQS takes).
pub const TRANSFER_ENCODING_ATTRIBUTE: &str = "content_transfer_encoding";

/// The value of [`TRANSFER_ENCODING_ATTRIBUTE`] for a base64 body.
pub const BASE64: &str = "base64";

/// The data type of every attribute weft sets.
const STRING_TYPE: &str = "String";

/// One message ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// The message body.
    pub body: Cow<'a, str>,
    /// String attributes: (name, value).
    pub attributes: Vec<(&'static str, String)>,
    /// `MessageGroupId` and `MessageDeduplicationId`, for a FIFO queue.
    pub fifo_ids: Option<FifoIds>,
}

/// A FIFO queue's ids of one message, as Sequin sets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FifoIds {
    /// Lowercase hex MD5 of the message's group: a row's changes are one
    /// group, which SQS delivers in order.
    pub group_id: String,
    /// Lowercase hex MD5 of the idempotency key: SQS drops a redelivery
    /// within its five-minute deduplication window.
    pub deduplication_id: String,
}

impl FifoIds {
    /// The ids of a message of `group_id` with `idempotency_key`.
    pub fn of(group_id: &str, idempotency_key: &str) -> FifoIds {
        FifoIds {
            group_id: md5_hex(group_id),
            deduplication_id: md5_hex(idempotency_key),
        }
    }
}

/// Lowercase hex MD5 of `text`.
pub fn md5_hex(text: &str) -> String {
    hex::encode(Md5::digest(text.as_bytes()))
}

impl<'a> Outgoing<'a> {
    /// `message` as SQS gets it; `fifo` says whether the queue is FIFO.
    pub fn of(message: &'a StoredMessage, fifo: bool) -> Outgoing<'a> {
        let (body, attributes) = match &message.payload {
            StoredPayload::Json(text) => (json_body(text), Vec::new()),
            StoredPayload::Bytes { content_type, data } => bytes_body(content_type, data),
        };
        Outgoing {
            body,
            attributes,
            fifo_ids: fifo.then(|| FifoIds::of(&message.group_id, &message.idempotency_key)),
        }
    }

    /// Its size as SQS counts it against its limit: the body, and each
    /// attribute's name, data type and value.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(name, value)| name.len() + STRING_TYPE.len() + value.len())
                .sum::<usize>()
    }
}

/// Whether SQS takes `c` in a message (the XML 1.0 characters).
fn allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Whether UTF-8 `text` holds a character SQS refuses, read from its
/// bytes without decoding them (every message passes here): a control character other
/// than tab, newline and carriage return, or U+FFFE or U+FFFF
/// (`EF BF BE`, `EF BF BF`). UTF-8 cannot hold surrogates.
fn holds_refused(text: &[u8]) -> bool {
    text.iter().enumerate().any(|(i, &b)| match b {
        b'\t' | b'\n' | b'\r' => false,
        0..0x20 => true,
        0xEF => matches!(text.get(i + 1..i + 3), Some([0xBF, 0xBE | 0xBF])),
        _ => false,
    })
}

/// The body of a JSON message: its stored text, unless it holds a
/// character SQS refuses. JSON text can only hold those inside strings
/// (U+FFFE and U+FFFF; serde writes control characters as escapes), where
/// an escape (`\uffff`) is the same JSON value, so the message is written
/// with escapes rather than refused.
fn json_body(text: &str) -> Cow<'_, str> {
    if !holds_refused(text.as_bytes()) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if allowed(c) {
            escaped.push(c);
        } else {
            escaped.push_str(&format!("\\u{:04x}", c as u32));
        }
    }
    Cow::Owned(escaped)
}

/// The body and attributes of a transform's bytes payload: the bytes as
/// they are when they are text SQS takes, else base64, marked so.
fn bytes_body<'a>(
    content_type: &str,
    data: &'a [u8],
) -> (Cow<'a, str>, Vec<(&'static str, String)>) {
    // SQS refuses an empty attribute value; the store's default type stands in.
    let content_type = match content_type.trim() {
        "" => "application/octet-stream",
        given => given,
    };
    let mut attributes = vec![(CONTENT_TYPE_ATTRIBUTE, content_type.to_string())];
    match std::str::from_utf8(data) {
        Ok(text) if !holds_refused(data) => (Cow::Borrowed(text), attributes),
        _ => {
            attributes.push((TRANSFER_ENCODING_ATTRIBUTE, BASE64.to_string()));
            let encoded = base64::engine::general_purpose::STANDARD.encode(data);
            (Cow::Owned(encoded), attributes)
        }
    }
}

#[cfg(test)]
mod tests {
    use weft_core::lsn::Lsn;
    use weft_core::route::Route;
    use weft_store::AckId;

    use super::*;

    fn stored(payload: StoredPayload) -> StoredMessage {
        StoredMessage {
            ack_id: AckId::new(),
            commit_lsn: Lsn(1),
            commit_idx: 0,
            group_id: "public.orders:42".into(),
            idempotency_key: "MTox".into(),
            size_bytes: payload.body().len(),
            payload,
            route: Route::default(),
            attempt: 1,
        }
    }

    #[test]
    fn fifo_ids_are_sequins_md5_of_group_and_idempotency_key() {
        // As Erlang's :crypto.hash(:md5, _) |> Base.encode16(case: :lower).
        assert_eq!(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            md5_hex("The quick brown fox jumps over the lazy dog"),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
        let message = stored(StoredPayload::Json("{}".into()));
        let outgoing = Outgoing::of(&message, true);
        assert_eq!(
            outgoing.fifo_ids,
            Some(FifoIds {
                group_id: md5_hex("public.orders:42"),
                deduplication_id: md5_hex("MTox"),
            })
        );
        assert_eq!(Outgoing::of(&message, false).fifo_ids, None);
    }

    #[test]
    fn json_is_sent_as_stored() {
        let text = r#"{"record":{"name":"Zoë \u0000 ☃ 𝄞"}}"#;
        let message = stored(StoredPayload::Json(text.into()));
        let outgoing = Outgoing::of(&message, false);
        assert!(matches!(outgoing.body, Cow::Borrowed(body) if body == text));
        assert!(outgoing.attributes.is_empty());
        assert_eq!(outgoing.size(), text.len());
    }

    #[test]
    fn characters_sqs_refuses_in_json_become_escapes_of_the_same_value() {
        let value = serde_json::json!({"note": "a\u{FFFE}b\u{FFFF}c"});
        let message = stored(StoredPayload::Json(value.to_string()));
        let body = Outgoing::of(&message, false).body.into_owned();
        assert_eq!(body, r#"{"note":"a\ufffeb\uffffc"}"#);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap(), value);
    }

    #[test]
    fn the_byte_scan_finds_exactly_the_refused_characters() {
        for c in ['\0', '\u{1f}', '\t', '\n', '\r', ' ', 'é', '\u{D7FF}', '\u{E000}', '\u{FFFD}', '\u{FFFE}', '\u{FFFF}', '\u{10000}', '\u{10FFFF}', '\u{EFBF}'] {
            let text = format!("a{c}b");
            assert_eq!(holds_refused(text.as_bytes()), !allowed(c), "{:?}", c);
        }
    }

    #[test]
    fn text_bytes_are_sent_as_they_are_with_their_content_type() {
        let message = stored(StoredPayload::Bytes {
            content_type: "text/csv".into(),
            data: "id,name\n1,Zoë\n".into(),
        });
        let outgoing = Outgoing::of(&message, false);
        assert_eq!(outgoing.body, "id,name\n1,Zoë\n");
        assert_eq!(
            outgoing.attributes,
            vec![(CONTENT_TYPE_ATTRIBUTE, "text/csv".to_string())]
        );
        assert_eq!(
            outgoing.size(),
            "id,name\n1,Zoë\n".len() + "content_type".len() + "String".len() + "text/csv".len()
        );
    }

    #[test]
    fn other_bytes_are_sent_in_base64_and_marked() {
        for data in [
            vec![0xff, 0x00, 0x80],                // not UTF-8
            b"nul \0 inside".to_vec(),             // UTF-8, but U+0000
            "\u{FFFF}".as_bytes().to_vec(),        // UTF-8, but a noncharacter
        ] {
            let message = stored(StoredPayload::Bytes {
                content_type: "application/avro".into(),
                data: data.clone(),
            });
            let outgoing = Outgoing::of(&message, false);
            assert_eq!(
                base64::engine::general_purpose::STANDARD
                    .decode(outgoing.body.as_bytes())
                    .unwrap(),
                data
            );
            assert_eq!(
                outgoing.attributes,
                vec![
                    (CONTENT_TYPE_ATTRIBUTE, "application/avro".to_string()),
                    (TRANSFER_ENCODING_ATTRIBUTE, BASE64.to_string()),
                ]
            );
        }
    }
}
