//! `api_tokens:` entries (sequin.yml's layout): the bearer tokens the HTTP
//! API accepts. With none, the API is open (and weft warns at start).

use std::fmt;

use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::bounds;

/// Fewest characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// One API token. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an API token mapping like {name: ci, token: \"${WEFT_CI_TOKEN}\"} or {name: ci, token_sha256: <hex>}"
)]
pub struct ApiTokenConfig {
    /// Its name, logged with the requests it authenticates.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// The account whose resources the token manages; none: an admin
    /// token, which manages everything (accounts included).
    #[serde(default)]
    pub account: Option<String>,
    /// The secret a client sends as `Authorization: Bearer <token>`; at
    /// least [`MIN_TOKEN_CHARS`] characters. Either this or
    /// `token_sha256`.
    #[serde(default)]
    pub token: Option<String>,
    /// The SHA-256 of the secret, in hex, so that the config file does
    /// not hold the secret itself (how `POST /api/api_tokens` stores the
    /// tokens it creates); kept in lower case.
    #[serde(default, deserialize_with = "lower_case")]
    pub token_sha256: Option<String>,
}

impl ApiTokenConfig {
    /// The SHA-256 of `secret` in lower-case hex, as `token_sha256` holds it.
    pub fn sha256_hex(secret: &str) -> String {
        hex::encode(Sha256::digest(secret.as_bytes()))
    }

    /// Whether `given` is this token, compared in constant time (for a
    /// hashed token, its hash is compared).
    pub fn matches(&self, given: &str) -> bool {
        match (&self.token, &self.token_sha256) {
            (Some(token), _) => bool::from(given.as_bytes().ct_eq(token.as_bytes())),
            (None, Some(sha256)) => {
                bool::from(Self::sha256_hex(given).as_bytes().ct_eq(sha256.as_bytes()))
            }
            (None, None) => false,
        }
    }

    /// What is wrong with the token, if anything, and which key it is
    /// about.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        match (&self.token, &self.token_sha256) {
            (Some(_), Some(_)) => Some((
                "token",
                "give `token` or `token_sha256`, not both".into(),
            )),
            (None, None) => Some((
                "token",
                "is missing; give the secret as `token`, or its SHA-256 in hex as `token_sha256`"
                    .into(),
            )),
            (Some(token), None) => Self::secret_problem(token).map(|p| ("token", p)),
            (None, Some(sha256)) => (sha256.len() != 64
                || !sha256.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| {
                (
                    "token_sha256",
                    "must be 64 hex digits, the SHA-256 of the secret (e.g. from `printf %s \"$TOKEN\" | sha256sum`)".into(),
                )
            }),
        }
    }

    /// What is wrong with the secret `token`, if anything.
    fn secret_problem(token: &str) -> Option<String> {
        let chars = token.chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Some(format!(
                "is {chars} characters long, too short to resist guessing; use at least {MIN_TOKEN_CHARS} random characters, e.g. from `openssl rand -hex 24`"
            ));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Some(
                "must not contain spaces or control characters (it travels in an HTTP header)"
                    .into(),
            );
        }
        None
    }
}

/// `token_sha256` in lower case, as [`ApiTokenConfig::sha256_hex`] writes
/// it, so that a request's hash compares with it as it is.
fn lower_case<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.map(|hash| hash.to_ascii_lowercase()))
}

impl fmt::Debug for ApiTokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiTokenConfig")
            .field("name", &self.name)
            .field("account", &self.account)
            .field("token", &"<redacted>")
            .finish()
    }
}
