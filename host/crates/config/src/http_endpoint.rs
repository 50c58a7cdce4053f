//! `http_endpoints:` entries: where webhook sinks send, and with which
//! headers and signing secret.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::bounds;

/// An HTTP endpoint webhook sinks deliver to.
///
/// `Debug` shows the names of secret headers and whether a signing secret
/// is set, never their values.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an http endpoint mapping with `name` and `url`"
)]
pub struct HttpEndpointConfig {
    /// The name webhook sinks refer to.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// The account that owns it (`accounts:`); none: the operator's.
    #[serde(default)]
    pub account: Option<String>,
    /// The base URL (`http://` or `https://`); a sink's
    /// `http_endpoint_path` is appended to it.
    #[serde(deserialize_with = "base_url")]
    pub url: String,
    /// Headers sent with every request.
    #[serde(default, deserialize_with = "bounds::scalar_map")]
    pub headers: BTreeMap<String, String>,
    /// Headers sent with every request whose values are secrets (e.g.
    /// `Authorization`): never logged or shown. Put the value in an
    /// environment variable: `Authorization: "Bearer ${HOOK_TOKEN}"`.
    #[serde(default, deserialize_with = "bounds::scalar_map")]
    pub encrypted_headers: BTreeMap<String, String>,
    /// The key of the HMAC-SHA256 signature sent in `X-Weft-Signature`, so
    /// that the receiver can check that weft sent the request. No signature
    /// header when unset.
    #[serde(default)]
    pub signing_secret: Option<String>,
}

impl fmt::Debug for HttpEndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEndpointConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &self.headers)
            .field(
                "encrypted_headers",
                &self.encrypted_headers.keys().collect::<Vec<_>>(),
            )
            .field(
                "signing_secret",
                &self.signing_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Errors never repeat the URL: a malformed one may hold a password.
fn base_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    let url = url::Url::parse(&text).map_err(|e| {
        de::Error::custom(format!(
            "invalid URL: {e}; write it like https://example.com/hooks"
        ))
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(de::Error::custom(
            "the URL holds credentials, which would show in logs and dead letters; \
             send them in `encrypted_headers` (e.g. Authorization) instead",
        ));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(de::Error::custom(format!(
            "the URL has scheme {:?}; use http or https",
            url.scheme()
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(de::Error::custom(
            "the URL has a query or fragment; give the base URL only",
        ));
    }
    Ok(text.trim_end_matches('/').to_string())
}
