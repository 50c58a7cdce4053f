//! `webhook_sources:` entries: HTTP endpoints weft serves at
//! `POST /api/webhook_sources/{name}`, whose messages sinks take with
//! `source: {webhook: NAME}` (see `docs/webhook_sources.md`).

use std::fmt;

use serde::Deserialize;

use super::bounds;

/// A webhook source: where external systems POST messages into weft.
///
/// `Debug` never shows the token or secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a webhook source mapping with `name` and `auth`"
)]
pub struct WebhookSourceConfig {
    /// The name in the URL (`/api/webhook_sources/{name}`) and in sinks'
    /// `source: {webhook: NAME}`; also `metadata.table_name` and
    /// `metadata.webhook_source` of its messages.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// The account that owns it (`accounts:`); none: the operator's.
    #[serde(default)]
    pub account: Option<String>,
    /// How a request proves it may post here.
    pub auth: WebhookAuth,
    /// Largest request body accepted, in bytes (1 to 67108864); a bigger
    /// one gets 413. Default 1048576 (1 MiB).
    #[serde(
        default = "default_max_body_bytes",
        deserialize_with = "bounds::in_range::<_, u64, 1, 67_108_864>"
    )]
    pub max_body_bytes: u64,
    /// How long an `Idempotency-Key` is remembered, in milliseconds (1000
    /// to 2592000000, 30 days): a request repeating a key within this time
    /// is a duplicate. Default 86400000 (24 hours).
    #[serde(
        default = "default_idempotency_key_retention_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1000, 2_592_000_000>"
    )]
    pub idempotency_key_retention_ms: u64,
}

/// Default `max_body_bytes` of a webhook source.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Default `idempotency_key_retention_ms` of a webhook source.
pub const DEFAULT_IDEMPOTENCY_KEY_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

fn default_max_body_bytes() -> u64 {
    DEFAULT_MAX_BODY_BYTES
}

fn default_idempotency_key_retention_ms() -> u64 {
    DEFAULT_IDEMPOTENCY_KEY_RETENTION_MS
}

impl WebhookSourceConfig {
    /// How long an idempotency key is remembered.
    pub fn idempotency_key_retention(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.idempotency_key_retention_ms)
    }
}

impl fmt::Debug for WebhookSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSourceConfig")
            .field("name", &self.name)
            .field("auth", &self.auth)
            .field("max_body_bytes", &self.max_body_bytes)
            .field(
                "idempotency_key_retention_ms",
                &self.idempotency_key_retention_ms,
            )
            .finish()
    }
}

/// `auth:` of a webhook source: exactly one way to authenticate.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "AuthDoc")]
pub enum WebhookAuth {
    /// `bearer_token`: requests carry `Authorization: Bearer <token>`.
    BearerToken(String),
    /// `hmac_secret`: requests carry `X-Weft-Signature: sha256=<hex>`, the
    /// HMAC-SHA256 of the raw body keyed with this secret (or of
    /// `"<X-Weft-Timestamp>.<body>"` when that header is sent, as weft's
    /// own webhook sink signs).
    HmacSecret(String),
}

impl fmt::Debug for WebhookAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebhookAuth::BearerToken(_) => f.write_str("BearerToken(<redacted>)"),
            WebhookAuth::HmacSecret(_) => f.write_str("HmacSecret(<redacted>)"),
        }
    }
}

/// `auth:` as written.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an auth mapping: `{bearer_token: ...}` or `{hmac_secret: ...}`"
)]
struct AuthDoc {
    #[serde(default)]
    bearer_token: Option<String>,
    #[serde(default)]
    hmac_secret: Option<String>,
}

impl TryFrom<AuthDoc> for WebhookAuth {
    type Error = String;

    fn try_from(doc: AuthDoc) -> Result<Self, String> {
        // The messages never quote the values: they are secrets.
        match (doc.bearer_token, doc.hmac_secret) {
            (Some(_), Some(_)) => Err(
                "set either `bearer_token` or `hmac_secret`, not both: a source checks one kind of credential"
                    .into(),
            ),
            (None, None) => Err(
                "set `bearer_token` (requests send `Authorization: Bearer <token>`) or `hmac_secret` (requests send `X-Weft-Signature: sha256=<hex HMAC-SHA256 of the body>`); put the value in an environment variable, e.g. `${HOOK_TOKEN}`"
                    .into(),
            ),
            (Some(token), None) if token.is_empty() => {
                Err("`bearer_token` must not be empty".into())
            }
            (None, Some(secret)) if secret.is_empty() => {
                Err("`hmac_secret` must not be empty".into())
            }
            (Some(token), None) => Ok(WebhookAuth::BearerToken(token)),
            (None, Some(secret)) => Ok(WebhookAuth::HmacSecret(secret)),
        }
    }
}
