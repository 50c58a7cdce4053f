//! Contexts: named weft servers (URL and API token) the CLI talks to, one
//! of them selected, kept in `contexts.json` under `$WEFT_HOME`, else
//! `$XDG_CONFIG_HOME/weft`, else `~/.config/weft`. The file holds tokens,
//! so it is written readable by its owner only.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The API's base URL, e.g. `http://127.0.0.1:7376`.
    pub url: String,
    /// The bearer token, if the server asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Every context, and which one commands use by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contexts {
    /// The selected context's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<String>,
    /// Contexts by name.
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

impl Contexts {
    /// Where the file is.
    pub fn path() -> Result<PathBuf, String> {
        let dir = if let Some(home) = std::env::var_os("WEFT_HOME") {
            PathBuf::from(home)
        } else if let Some(config) = std::env::var_os("XDG_CONFIG_HOME") {
            PathBuf::from(config).join("weft")
        } else if let Some(home) = std::env::var_os("HOME") {
            PathBuf::from(home).join(".config").join("weft")
        } else {
            return Err("cannot tell where to keep contexts: set WEFT_HOME or HOME".into());
        };
        Ok(dir.join("contexts.json"))
    }

    /// The saved contexts (none when the file does not exist yet).
    pub fn load() -> Result<Contexts, String> {
        let path = Contexts::path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{} is not a contexts file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Contexts::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Saves them, readable by the owner only.
    pub fn save(&self) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = Contexts::path()?;
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(fail)?;
        let text = serde_json::to_string_pretty(self).expect("contexts serialize");
        file.write_all(text.as_bytes()).map_err(fail)
    }

    /// Adds (or replaces) `name`; the first context added is selected.
    pub fn add(&mut self, name: &str, context: Context) {
        self.contexts.insert(name.to_string(), context);
        if self.selected.is_none() {
            self.selected = Some(name.to_string());
        }
    }

    /// Selects `name`, which must exist.
    pub fn select(&mut self, name: &str) -> Result<(), String> {
        if !self.contexts.contains_key(name) {
            return Err(self.unknown(name));
        }
        self.selected = Some(name.to_string());
        Ok(())
    }

    /// Removes `name`, which must exist.
    pub fn remove(&mut self, name: &str) -> Result<(), String> {
        if self.contexts.remove(name).is_none() {
            return Err(self.unknown(name));
        }
        if self.selected.as_deref() == Some(name) {
            self.selected = None;
        }
        Ok(())
    }

    /// The context `name`, or the selected one.
    pub fn get(&self, name: Option<&str>) -> Result<Option<&Context>, String> {
        match name.or(self.selected.as_deref()) {
            None => Ok(None),
            Some(name) => self
                .contexts
                .get(name)
                .map(Some)
                .ok_or_else(|| self.unknown(name)),
        }
    }

    fn unknown(&self, name: &str) -> String {
        let known: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
        format!(
            "no context named {name:?}; known contexts: {known:?} (add one with `weft context add NAME --url URL`)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Context {
        Context {
            url: "http://127.0.0.1:7376".into(),
            token: None,
        }
    }

    #[test]
    fn the_first_context_is_selected_and_unknown_ones_are_named() {
        let mut contexts = Contexts::default();
        contexts.add("local", local());
        contexts.add("prod", local());
        assert_eq!(contexts.selected.as_deref(), Some("local"));
        contexts.select("prod").unwrap();
        assert_eq!(contexts.get(None).unwrap(), Some(&local()));
        let error = contexts.select("staging").unwrap_err();
        assert!(
            error.contains("known contexts: [\"local\", \"prod\"]"),
            "{error}"
        );
        contexts.remove("prod").unwrap();
        assert_eq!(contexts.selected, None);
    }
}
