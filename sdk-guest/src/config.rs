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

impl From<Vec<(String, String)>> for Config {
    fn from(pairs: Vec<(String, String)>) -> Self {
        Config(pairs.into_iter().collect())
    }
}
