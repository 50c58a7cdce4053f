//! `config export`: the config as YAML, with every secret redacted unless
//! the caller asks for secrets explicitly.
//!
//! Secrets are the values of keys that name one (`password`, `*secret*`,
//! `*token*`, `*_seed`, `api_key`), every value of `encrypted_headers`, and
//! the password in the user-info of any `*url` (`postgres://u:pw@host`).
//! A secret written as a bare `${VAR}` reference is kept as written: it
//! names the secret without revealing it, and the export still applies.
//! Anything else in a secret's place becomes [`REDACTED`].

use serde_yaml_ng::Value;

use super::interpolate::interpolate;
use super::path::DocPath;
use super::{ConfigError, ConfigIssue};

/// What a redacted secret reads as.
pub const REDACTED: &str = "(redacted)";

/// Whether `config export` shows secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Replace them with [`REDACTED`] (the default everywhere).
    Redact,
    /// Show them, interpolated: only on an explicit request.
    Show,
}

/// The config `text` (as written, before `${VAR}` interpolation) as YAML,
/// with secrets treated as `secrets` says; `env` resolves `${VAR}`
/// references when secrets are shown.
pub fn export(
    text: &str,
    secrets: Secrets,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut document = match secrets {
        Secrets::Show => parse(&interpolate(text, env).map_err(ConfigError::invalid)?)?,
        // References are kept: parse the text as written. A reference in a
        // place YAML cannot parse falls back to the interpolated text.
        Secrets::Redact => match parse(text) {
            Ok(document) => document,
            Err(_) => parse(&interpolate(text, env).map_err(ConfigError::invalid)?)?,
        },
    };
    if secrets == Secrets::Redact {
        redact(&mut document, None);
    }
    serde_yaml_ng::to_string(&document)
        .map_err(|error| whole_document(format!("cannot render the config as YAML: {error}")))
}

fn parse(text: &str) -> Result<Value, ConfigError> {
    serde_yaml_ng::from_str(text)
        .map_err(|error| whole_document(format!("the config is not valid YAML: {error}")))
}

fn whole_document(message: String) -> ConfigError {
    ConfigError::invalid(vec![ConfigIssue::at(&DocPath::root(), message)])
}

/// Redacts the secrets in `value`, found under the mapping key `key`.
fn redact(value: &mut Value, key: Option<&str>) {
    let key = key.map(str::to_ascii_lowercase);
    match value {
        Value::Mapping(mapping) => {
            let all_secret = key.as_deref() == Some("encrypted_headers");
            for (child_key, child) in mapping.iter_mut() {
                if all_secret {
                    *child = redacted(child);
                } else {
                    redact(child, child_key.as_str());
                }
            }
        }
        Value::Sequence(items) => {
            for item in items {
                redact(item, None);
            }
        }
        Value::Tagged(tagged) => redact(&mut tagged.value, key.as_deref()),
        Value::Null => {}
        scalar => match key.as_deref() {
            Some(key) if is_secret_key(key) => *scalar = redacted(scalar),
            Some(key) if key.ends_with("url") => {
                if let Value::String(url) = scalar {
                    *url = redact_url_password(url);
                }
            }
            _ => {}
        },
    }
}

fn is_secret_key(key: &str) -> bool {
    key == "password"
        || key.ends_with("_password")
        || key.contains("secret")
        || key.contains("token")
        || key.ends_with("_seed")
        || key == "api_key"
}

/// A secret's replacement: a bare `${VAR}` reference stays, anything else
/// is [`REDACTED`].
fn redacted(value: &Value) -> Value {
    match value {
        Value::String(text) if is_reference(text) => value.clone(),
        _ => Value::String(REDACTED.into()),
    }
}

/// Whether `text` is exactly one `${NAME}` reference without a default.
fn is_reference(text: &str) -> bool {
    text.strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// `url` with the password of its user-info redacted (`scheme://user:pw@host`).
fn redact_url_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    let authority = &url[authority_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_string();
    };
    let password = &userinfo[colon + 1..];
    if password.is_empty() || is_reference(password) {
        return url.to_string();
    }
    format!(
        "{}{}:{REDACTED}{}",
        &url[..authority_start],
        &userinfo[..colon],
        &url[authority_start + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
databases:
  - name: app
    url: postgres://weft:hunter2@db:5432/app?sslmode=require
    slot: {name: s}
    publication: {name: p}
  - name: other
    hostname: db
    password: ${DB_PASSWORD}
    slot: {name: s2}
    publication: {name: p2}
http_endpoints:
  - name: hook
    url: https://example.com/hook
    headers: {X-Team: core}
    encrypted_headers: {Authorization: Bearer abc123, X-Key: "${HOOK_KEY}"}
    signing_secret: whsec_42
sinks:
  - name: k
    database: app
    destination:
      type: kafka
      hosts: localhost:9092
      topic: t
      username: u
      password: kafka-pw
      sasl_mechanism: plain
  - name: r
    database: app
    destination:
      type: redis_string
      url: redis://:redis-pw@localhost:6379/0
      nkey_seed: SUANOTREAL
"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "DB_PASSWORD" => Some("from-env-pw".into()),
            "HOOK_KEY" => Some("hook-key-value".into()),
            _ => None,
        }
    }

    #[test]
    fn redacted_export_holds_no_secret_and_keeps_the_rest() {
        let yaml = export(CONFIG, Secrets::Redact, &env).unwrap();
        for secret in [
            "hunter2",
            "abc123",
            "whsec_42",
            "kafka-pw",
            "redis-pw",
            "SUANOTREAL",
            "from-env-pw",
            "hook-key-value",
        ] {
            assert!(!yaml.contains(secret), "{secret} leaked:\n{yaml}");
        }
        let doc: Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(
            doc["databases"][0]["url"].as_str(),
            Some("postgres://weft:(redacted)@db:5432/app?sslmode=require")
        );
        assert_eq!(
            doc["databases"][1]["password"].as_str(),
            Some("${DB_PASSWORD}")
        );
        assert_eq!(
            doc["http_endpoints"][0]["encrypted_headers"]["X-Key"].as_str(),
            Some("${HOOK_KEY}")
        );
        assert_eq!(
            doc["http_endpoints"][0]["encrypted_headers"]["Authorization"].as_str(),
            Some(REDACTED)
        );
        assert_eq!(
            doc["http_endpoints"][0]["headers"]["X-Team"].as_str(),
            Some("core")
        );
        assert_eq!(
            doc["http_endpoints"][0]["url"].as_str(),
            Some("https://example.com/hook")
        );
        assert_eq!(
            doc["sinks"][0]["destination"]["username"].as_str(),
            Some("u")
        );
        assert_eq!(
            doc["sinks"][1]["destination"]["url"].as_str(),
            Some("redis://:(redacted)@localhost:6379/0")
        );
    }

    #[test]
    fn secrets_show_only_when_asked_and_interpolated() {
        let yaml = export(CONFIG, Secrets::Show, &env).unwrap();
        for secret in [
            "hunter2",
            "abc123",
            "kafka-pw",
            "from-env-pw",
            "hook-key-value",
        ] {
            assert!(yaml.contains(secret), "{secret} missing:\n{yaml}");
        }
    }

    #[test]
    fn url_passwords_are_found_in_every_form() {
        assert_eq!(
            redact_url_password("amqp://guest:guest@h:5672/%2f"),
            "amqp://guest:(redacted)@h:5672/%2f"
        );
        assert_eq!(
            redact_url_password("postgres://u@h/db"),
            "postgres://u@h/db"
        );
        assert_eq!(
            redact_url_password("postgres://u:${PW}@h/db"),
            "postgres://u:${PW}@h/db"
        );
        assert_eq!(
            redact_url_password("https://h/p?x=a:b@c"),
            "https://h/p?x=a:b@c"
        );
        assert_eq!(redact_url_password("not a url"), "not a url");
    }
}
