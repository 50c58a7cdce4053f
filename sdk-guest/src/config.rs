use std::collections::BTreeMap;

/// The function's configuration: the key/value pairs of its entry in the
/// weft config, given once to `init`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config(BTreeMap<String, String>);

impl Config {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The value of `key`, or an error that names the missing key, ready to
    /// return from `init`.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("missing config key `{key}`: set it in the function's config"))
    }

    /// All pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Pairs written inline, e.g. in tests:
/// `Config::from(&[("column", "name")][..])`.
impl From<&[(&str, &str)]> for Config {
    fn from(pairs: &[(&str, &str)]) -> Self {
        Config(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }
}

impl From<Vec<(String, String)>> for Config {
    fn from(pairs: Vec<(String, String)>) -> Self {
        Config(pairs.into_iter().collect())
    }
}

impl Config {
    /// The comma-separated list under `key`, each entry trimmed, empty
    /// entries left out; an empty list when the key is not set.
    ///
    /// ```
    /// # use weft_sdk_guest::Config;
    /// let config = Config::from(vec![("columns".to_string(), " a, b,,c ".to_string())]);
    /// assert_eq!(config.list("columns"), ["a", "b", "c"]);
    /// assert!(config.list("other").is_empty());
    /// ```
    pub fn list(&self, key: &str) -> Vec<&str> {
        self.get(key)
            .map(|value| {
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|entry| !entry.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Refuses a key that `is_known` does not accept, so that a typo in the
    /// config is an error at load time rather than a setting silently
    /// ignored. `known` describes the accepted keys for the message.
    ///
    /// ```
    /// # use weft_sdk_guest::Config;
    /// let config = Config::from(vec![("colums".to_string(), "a".to_string())]);
    /// let error = config.refuse_unknown_keys(|k| k == "columns", "`columns`").unwrap_err();
    /// assert_eq!(error, "unknown config key `colums`: the known keys are `columns`");
    /// ```
    pub fn refuse_unknown_keys(
        &self,
        is_known: impl Fn(&str) -> bool,
        known: &str,
    ) -> Result<(), String> {
        match self.0.keys().find(|key| !is_known(key)) {
            Some(key) => Err(format!(
                "unknown config key `{key}`: the known keys are {known}"
            )),
            None => Ok(()),
        }
    }
}
