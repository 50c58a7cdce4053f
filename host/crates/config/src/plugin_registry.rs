//! Registered plugins: a function's `plugin: name@version` reference (in
//! place of a `file`) and the `plugin_registry:` policy that uploads
//! through `POST /api/plugins` are checked against.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, de};

use super::bounds;

/// A registered plugin version, written `name@version`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
}

impl PluginRef {
    /// What is wrong with a plugin name, if anything.
    pub fn name_problem(name: &str) -> Option<String> {
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        (!valid).then(|| {
            format!("invalid plugin name {name:?}: use 1 to 128 letters, digits, `_` or `-`")
        })
    }

    /// What is wrong with a plugin version, if anything.
    pub fn version_problem(version: &str) -> Option<String> {
        let valid = !version.is_empty()
            && version.len() <= 64
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
        (!valid).then(|| {
            format!(
                "invalid plugin version {version:?}: use 1 to 64 letters, digits, `.`, `_`, `-` or `+` (e.g. 1.2.0)"
            )
        })
    }
}

impl FromStr for PluginRef {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (name, version) = text.split_once('@').ok_or_else(|| {
            format!(
                "invalid plugin reference {text:?}: write it as name@version, e.g. mask-pii@1.2.0"
            )
        })?;
        if let Some(problem) = Self::name_problem(name).or_else(|| Self::version_problem(version)) {
            return Err(problem);
        }
        Ok(PluginRef {
            name: name.to_string(),
            version: version.to_string(),
        })
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl<'de> Deserialize<'de> for PluginRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(de::Error::custom)
    }
}

/// A host capability a registered plugin may import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// `weft:plugin/source-query`: read-only queries on the source database.
    SourceQuery,
    /// `weft:plugin/outbound-http`: HTTP requests to allow-listed hosts.
    OutboundHttp,
}

impl Capability {
    /// Its name in config (`source_query`, `outbound_http`).
    pub fn name(self) -> &'static str {
        match self {
            Capability::SourceQuery => "source_query",
            Capability::OutboundHttp => "outbound_http",
        }
    }

    /// The WIT import that asks for it.
    pub const fn import(self) -> &'static str {
        match self {
            Capability::SourceQuery => {
                concat!("weft:plugin/source-query@", weft_core::wit_version!())
            }
            Capability::OutboundHttp => {
                concat!("weft:plugin/outbound-http@", weft_core::wit_version!())
            }
        }
    }
}

/// `plugin_registry:`: what an uploaded plugin may be.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a plugin_registry mapping like {allow_capabilities: [source_query], max_component_mb: 64}"
)]
pub struct PluginRegistryConfig {
    /// The host capabilities an uploaded component may import; an upload
    /// importing any other is refused with the offending imports. Default
    /// none: only components that need no capability are accepted.
    #[serde(default)]
    pub allow_capabilities: Vec<Capability>,
    /// The largest component accepted, in MiB. Default 64.
    #[serde(
        default = "default_max_component_mb",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1024>"
    )]
    pub max_component_mb: u32,
}

impl Default for PluginRegistryConfig {
    fn default() -> Self {
        PluginRegistryConfig {
            allow_capabilities: Vec::new(),
            max_component_mb: default_max_component_mb(),
        }
    }
}

impl PluginRegistryConfig {
    /// The imports of [`Self::allow_capabilities`].
    pub fn allowed_imports(&self) -> Vec<&'static str> {
        self.allow_capabilities.iter().map(|c| c.import()).collect()
    }

    /// The largest component accepted, in bytes.
    pub fn max_component_bytes(&self) -> usize {
        self.max_component_mb as usize * 1024 * 1024
    }
}

fn default_max_component_mb() -> u32 {
    64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_as_name_at_version() {
        let parsed: PluginRef = "mask-pii@1.2.0+build.7".parse().unwrap();
        assert_eq!(parsed.name, "mask-pii");
        assert_eq!(parsed.version, "1.2.0+build.7");
        assert_eq!(parsed.to_string(), "mask-pii@1.2.0+build.7");
        assert!(
            "mask-pii"
                .parse::<PluginRef>()
                .unwrap_err()
                .contains("name@version"),
            "a reference without a version names the form"
        );
        assert!(
            "a/b@1"
                .parse::<PluginRef>()
                .unwrap_err()
                .contains("plugin name")
        );
        assert!(
            "a@1 2"
                .parse::<PluginRef>()
                .unwrap_err()
                .contains("plugin version")
        );
        assert!("a@".parse::<PluginRef>().is_err());
    }

    #[test]
    fn capabilities_name_their_imports() {
        assert!(Capability::SourceQuery.import().contains("source-query"));
        assert!(Capability::OutboundHttp.import().contains("outbound-http"));
    }
}
