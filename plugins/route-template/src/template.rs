//! Templates: literal text with `{path}` placeholders filled from the
//! Sequin message of a change.

use std::collections::BTreeMap;

use weft_sdk_guest::path::kind;
use weft_sdk_guest::serde_json::Value;
use weft_sdk_guest::{Error, MessagePath};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Field(MessagePath),
}

/// A parsed template such as `orders.{record.region}`; `{{` and `}}` stand
/// for literal braces.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Part>);

impl Template {
    /// Parses `text`; an unclosed or empty placeholder, a stray `}` or a
    /// bad path is an error saying which.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut path = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        path.push(c);
                    }
                    if !closed {
                        return Err(format!(
                            "placeholder `{{{path}` in `{text}` is not closed with `}}` (write `{{{{` for a literal brace)"
                        ));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Field(MessagePath::parse(path.trim())?));
                }
                '}' => {
                    return Err(format!(
                        "stray `}}` in `{text}`: write `}}}}` for a literal brace"
                    ));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template(parts))
    }

    /// The paths of the placeholders, as written.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|part| match part {
            Part::Field(path) => Some(path.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The text for `message`. A placeholder whose value is missing or null
    /// takes its entry in `defaults`, or is a permanent error naming it;
    /// strings go in as they are, numbers and booleans as JSON text, and an
    /// object or array is a permanent error.
    pub fn render(
        &self,
        message: &Value,
        defaults: &BTreeMap<String, String>,
    ) -> Result<String, Error> {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field(path) => match (path.resolve(message)?, defaults.get(path.as_str())) {
                    (Some(Value::String(text)), _) => out.push_str(text),
                    (Some(value @ (Value::Number(_) | Value::Bool(_))), _) => {
                        out.push_str(&value.to_string())
                    }
                    (Some(other), _) => {
                        return Err(Error::permanent(format!(
                            "template field `{}` is {}, not a string, number or boolean",
                            path.as_str(),
                            kind(other)
                        )));
                    }
                    (None, Some(default)) => out.push_str(default),
                    (None, None) => {
                        return Err(Error::permanent(format!(
                            "template field `{path}` is missing or null in this change; set `default.{path}` in the function's config to route such changes",
                            path = path.as_str()
                        )));
                    }
                },
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::serde_json::json;

    #[test]
    fn renders_fields_and_literal_braces() {
        let t = Template::parse("orders.{record.region}.{{{metadata.table_name}}}:{record.id}")
            .unwrap();
        let message = json!({"record": {"region": "eu", "id": 7}, "metadata": {"table_name": "t"}});
        assert_eq!(
            t.render(&message, &BTreeMap::new()).unwrap(),
            "orders.eu.{t}:7"
        );
    }

    #[test]
    fn a_missing_field_takes_its_default_or_fails_naming_it() {
        let t = Template::parse("orders.{record.region}").unwrap();
        let message = json!({"record": {"region": null}});
        let defaults = BTreeMap::from([("record.region".to_string(), "none".to_string())]);
        assert_eq!(t.render(&message, &defaults).unwrap(), "orders.none");
        assert_eq!(
            t.render(&message, &BTreeMap::new()),
            Err(Error::permanent(
                "template field `record.region` is missing or null in this change; set `default.record.region` in the function's config to route such changes"
            ))
        );
        let nested = json!({"record": {"region": {"a": 1}}});
        assert!(
            t.render(&nested, &BTreeMap::new())
                .unwrap_err()
                .to_string()
                .contains("is an object")
        );
    }

    #[test]
    fn malformed_templates_are_refused() {
        assert!(
            Template::parse("a.{record.x")
                .unwrap_err()
                .contains("is not closed")
        );
        assert!(Template::parse("a}").unwrap_err().contains("stray `}`"));
        assert!(
            Template::parse("{row.x}")
                .unwrap_err()
                .contains("must start with `record`")
        );
        assert!(Template::parse("{}").is_err());
    }
}
