//! Which columns a row keeps, and under which names.

use std::collections::{BTreeMap, BTreeSet};

use weft_sdk_guest::serde_json::{Map, Value};
use weft_sdk_guest::{Config, Error};

/// Column selection parsed from `include`, `exclude` and `rename`.
#[derive(Debug)]
pub struct Columns {
    /// Keep only these, in this order (`None`: keep all but `exclude`).
    include: Option<Vec<String>>,
    /// Drop these.
    exclude: BTreeSet<String>,
    /// Old name to new name.
    rename: BTreeMap<String, String>,
}

impl Columns {
    /// Reads and checks the three keys; at least one must be set.
    pub fn from_config(config: &Config) -> Result<Columns, String> {
        let include: Option<Vec<String>> = config.get("include").map(|_| {
            config
                .list("include")
                .into_iter()
                .map(String::from)
                .collect()
        });
        let exclude: BTreeSet<String> = config
            .list("exclude")
            .into_iter()
            .map(String::from)
            .collect();
        let rename = parse_rename(config.get("rename").unwrap_or(""))?;
        if include.is_none() && exclude.is_empty() && rename.is_empty() {
            return Err("set `include`, `exclude` or `rename` (comma-separated column names; `rename` as `old:new` pairs), or `path` to extract one value".into());
        }
        if include.as_ref().is_some_and(Vec::is_empty) {
            return Err(
                "`include` is empty: list the columns to keep, e.g. `include: \"id,name\"`".into(),
            );
        }
        if include.is_some() && !exclude.is_empty() {
            return Err("set `include` or `exclude`, not both: `include` already drops every column it does not list".into());
        }
        for old in rename.keys() {
            if exclude.contains(old) {
                return Err(format!(
                    "`rename` renames `{old}`, which `exclude` drops: remove one of them"
                ));
            }
            if include.as_ref().is_some_and(|keep| !keep.contains(old)) {
                return Err(format!(
                    "`rename` renames `{old}`, which `include` does not keep: add it to `include`"
                ));
            }
        }
        Ok(Columns {
            include,
            exclude,
            rename,
        })
    }

    /// The row with the selection applied; `part` (`record` or `changes`)
    /// names the row in errors. A renamed column that lands on a name the
    /// row keeps under its own name is a permanent error.
    pub fn apply(
        &self,
        mut row: Map<String, Value>,
        part: &str,
    ) -> Result<Map<String, Value>, Error> {
        let kept: Vec<(String, Value)> = match &self.include {
            Some(keep) => keep
                .iter()
                .filter_map(|name| row.remove(name).map(|value| (name.clone(), value)))
                .collect(),
            None => row
                .into_iter()
                .filter(|(name, _)| !self.exclude.contains(name))
                .collect(),
        };
        let mut out = Map::new();
        for (name, value) in kept {
            let name = self.rename.get(&name).cloned().unwrap_or(name);
            if out.insert(name.clone(), value).is_some() {
                return Err(Error::permanent(format!(
                    "{part}: renaming to `{name}` collides with a column of that name; rename or exclude that column too"
                )));
            }
        }
        Ok(out)
    }
}

/// `old:new,old2:new2`, checked: both names present, each old and new name
/// used once.
fn parse_rename(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut rename = BTreeMap::new();
    let mut targets = BTreeSet::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((old, new)) = entry.split_once(':').map(|(o, n)| (o.trim(), n.trim())) else {
            return Err(format!(
                "`rename` entry `{entry}` is not `old:new`: write e.g. `rename: \"name:full_name,email:contact\"`"
            ));
        };
        if old.is_empty() || new.is_empty() {
            return Err(format!(
                "`rename` entry `{entry}` needs a name on both sides of `:`"
            ));
        }
        if !targets.insert(new.to_string()) {
            return Err(format!(
                "`rename` gives two columns the name `{new}`: pick distinct names"
            ));
        }
        if rename.insert(old.to_string(), new.to_string()).is_some() {
            return Err(format!("`rename` renames `{old}` twice: keep one entry"));
        }
    }
    Ok(rename)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::serde_json::json;

    fn columns(pairs: &[(&str, &str)]) -> Result<Columns, String> {
        Columns::from_config(&Config::from(pairs))
    }

    fn row(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn include_keeps_listed_columns_in_order_and_renames() {
        let c = columns(&[("include", "name, id"), ("rename", "name:full_name")]).unwrap();
        let out = c
            .apply(
                row(json!({"id": 1, "name": "Ada", "email": "a@x"})),
                "record",
            )
            .unwrap();
        assert_eq!(
            Value::Object(out).to_string(),
            r#"{"full_name":"Ada","id":1}"#
        );
    }

    #[test]
    fn exclude_drops_and_a_rename_collision_is_permanent() {
        let c = columns(&[("exclude", "email"), ("rename", "name:id")]).unwrap();
        let error = c
            .apply(
                row(json!({"id": 1, "name": "Ada", "email": "a@x"})),
                "record",
            )
            .unwrap_err();
        assert_eq!(
            error,
            Error::permanent(
                "record: renaming to `id` collides with a column of that name; rename or exclude that column too"
            )
        );
        let c = columns(&[("exclude", "email")]).unwrap();
        let out = c
            .apply(row(json!({"id": 1, "email": "a@x"})), "changes")
            .unwrap();
        assert_eq!(Value::Object(out), json!({"id": 1}));
    }

    #[test]
    fn bad_config_is_refused_with_the_reason() {
        let err = |pairs: &[(&str, &str)]| columns(pairs).unwrap_err();
        assert!(err(&[]).starts_with("set `include`, `exclude` or `rename`"));
        assert!(err(&[("include", "a"), ("exclude", "b")]).contains("not both"));
        assert!(err(&[("rename", "a")]).contains("is not `old:new`"));
        assert!(err(&[("rename", "a:x,b:x")]).contains("two columns the name `x`"));
        assert!(err(&[("include", "a"), ("rename", "b:c")]).contains("add it to `include`"));
        assert!(err(&[("include", " , ")]).contains("`include` is empty"));
    }
}
