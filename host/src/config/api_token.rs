//! `api_tokens:` entries (sequin.yml's layout): the bearer tokens the HTTP
//! API accepts. With none, the API is open (and weft warns at start).

use std::fmt;

use serde::Deserialize;

use super::bounds;

/// Fewest characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// One API token. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an API token mapping like {name: ci, token: \"${WEFT_CI_TOKEN}\"}"
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
    /// least [`MIN_TOKEN_CHARS`] characters.
    pub token: String,
}

impl ApiTokenConfig {
    /// What is wrong with the token, if anything.
    pub fn problem(&self) -> Option<String> {
        let chars = self.token.chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Some(format!(
                "is {chars} characters long, too short to resist guessing; use at least {MIN_TOKEN_CHARS} random characters, e.g. from `openssl rand -hex 24`"
            ));
        }
        if self
            .token
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Some(
                "must not contain spaces or control characters (it travels in an HTTP header)"
                    .into(),
            );
        }
        None
    }
}

impl fmt::Debug for ApiTokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiTokenConfig")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .finish()
    }
}
