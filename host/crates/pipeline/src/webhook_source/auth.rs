//! Checks that a request may post to a webhook source: a bearer token, or
//! an HMAC-SHA256 signature of the body. Both compare in constant time, and
//! no failure ever repeats the configured token or secret.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use http::header;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use weft_sinks::config::WebhookAuth;
use weft_sinks::webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER};

/// How far `X-Weft-Timestamp` may be from weft's clock before a signed
/// request counts as a replay.
pub const TIMESTAMP_TOLERANCE_SECS: u64 = 300;

/// Why a request was refused (answered 401; nothing is stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No `Authorization: Bearer ...` header.
    #[error(
        "missing `Authorization: Bearer <token>` header; this webhook source takes a bearer token"
    )]
    MissingToken,
    /// The token is not the configured one.
    #[error("the bearer token does not match this webhook source's `bearer_token`")]
    WrongToken,
    /// No signature header.
    #[error(
        "missing `X-Weft-Signature: sha256=<hex>` header; this webhook source takes an HMAC-SHA256 signature of the body"
    )]
    MissingSignature,
    /// The signature header is not `sha256=` and 64 hex digits.
    #[error(
        "`X-Weft-Signature` must be `sha256=` followed by the 64 hex digits of the HMAC-SHA256"
    )]
    MalformedSignature,
    /// The timestamp header is not a Unix time near now.
    #[error(
        "`X-Weft-Timestamp` must be the Unix time in seconds, within {TIMESTAMP_TOLERANCE_SECS} s of now; an old signed request cannot be replayed"
    )]
    StaleTimestamp,
    /// The signature is not the body's.
    #[error(
        "the signature does not match the body: sign the raw body (or `<X-Weft-Timestamp>.<body>`) with HMAC-SHA256 keyed with `hmac_secret`"
    )]
    WrongSignature,
}

/// Checks the headers that can be checked before the body is read: the
/// bearer token. A signed source passes here and is checked by
/// [`verify_body`].
pub fn verify_headers(auth: &WebhookAuth, headers: &HeaderMap) -> Result<(), AuthFailure> {
    let WebhookAuth::BearerToken(token) = auth else {
        return Ok(());
    };
    let given = bearer(headers).ok_or(AuthFailure::MissingToken)?;
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        Err(AuthFailure::WrongToken)
    }
}

/// Checks the signature of `body` for a signed source: the HMAC-SHA256 of
/// the raw body, or of `"<timestamp>.<body>"` when `X-Weft-Timestamp` is
/// sent (what weft's webhook sink sends, so one weft can post to another).
/// `now_secs` is the Unix time. A bearer-token source passes.
pub fn verify_body(
    auth: &WebhookAuth,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: u64,
) -> Result<(), AuthFailure> {
    let WebhookAuth::HmacSecret(secret) = auth else {
        return Ok(());
    };
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signature = text(SIGNATURE_HEADER).ok_or(AuthFailure::MissingSignature)?;
    let digest = signature
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|d| d.len() == 32)
        .ok_or(AuthFailure::MalformedSignature)?;
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    if let Some(timestamp) = text(TIMESTAMP_HEADER) {
        let at: u64 = timestamp
            .trim()
            .parse()
            .map_err(|_| AuthFailure::StaleTimestamp)?;
        if at.abs_diff(now_secs) > TIMESTAMP_TOLERANCE_SECS {
            return Err(AuthFailure::StaleTimestamp);
        }
        mac.update(timestamp.trim().as_bytes());
        mac.update(b".");
    }
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&digest)
        .map_err(|_| AuthFailure::WrongSignature)
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn sign(secret: &str, text: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(text);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn only_the_configured_bearer_token_passes() {
        let auth = WebhookAuth::BearerToken("t0ken".into());
        assert_eq!(
            verify_headers(&auth, &headers(&[("authorization", "Bearer t0ken")])),
            Ok(())
        );
        for (value, failure) in [
            ("Bearer t0ke", AuthFailure::WrongToken),
            ("Bearer t0ken2", AuthFailure::WrongToken),
            ("Basic t0ken", AuthFailure::MissingToken),
        ] {
            let got = verify_headers(&auth, &headers(&[("authorization", value)]));
            assert_eq!(got, Err(failure), "{value}");
            assert!(!got.unwrap_err().to_string().contains("t0ken"));
        }
        assert_eq!(
            verify_headers(&auth, &HeaderMap::new()),
            Err(AuthFailure::MissingToken)
        );
    }

    #[test]
    fn a_signature_of_the_body_or_of_timestamp_dot_body_passes() {
        let auth = WebhookAuth::HmacSecret("s3cret".into());
        let body = br#"{"id":1}"#;
        let raw = sign("s3cret", body);
        assert_eq!(
            verify_body(&auth, &headers(&[("x-weft-signature", &raw)]), body, 0),
            Ok(())
        );
        // The same signature over another body fails.
        assert_eq!(
            verify_body(&auth, &headers(&[("x-weft-signature", &raw)]), b"{}", 0),
            Err(AuthFailure::WrongSignature)
        );
        // weft's webhook sink signs "<timestamp>.<body>".
        let now = 1_700_000_000;
        let by_sink = weft_sinks::webhook::signature(b"s3cret", now, body);
        let signed = headers(&[
            ("x-weft-signature", &by_sink),
            ("x-weft-timestamp", "1700000000"),
        ]);
        assert_eq!(verify_body(&auth, &signed, body, now + 10), Ok(()));
        assert_eq!(
            verify_body(&auth, &signed, body, now + 1000),
            Err(AuthFailure::StaleTimestamp)
        );
        assert_eq!(
            verify_body(
                &auth,
                &headers(&[("x-weft-signature", "sha256=zz")]),
                body,
                0
            ),
            Err(AuthFailure::MalformedSignature)
        );
        assert_eq!(
            verify_body(&auth, &HeaderMap::new(), body, 0),
            Err(AuthFailure::MissingSignature)
        );
        // A signed source does not look at bearer tokens.
        assert_eq!(verify_headers(&auth, &HeaderMap::new()), Ok(()));
    }
}
