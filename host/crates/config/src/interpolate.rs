//! `${VAR}` and `${VAR:-default}` substitution on the raw config text, before
//! YAML parsing, as sequin.yml does it.
//!
//! * `${VAR}` is replaced by the variable's value; an unset variable is an
//!   error naming it and its line.
//! * `${VAR:-default}` uses `default` when `VAR` is unset or empty (shell
//!   semantics). The default runs to the first `}` and is not interpolated.
//! * `$$` is a literal `$`. A `$` followed by anything but `{` or `$` is kept
//!   as is, so passwords like `pa$word` need no escaping.
//!
//! Substitution is textual: a value with YAML syntax in it (`: `, `#`, a
//! leading `*`) needs quotes around the reference, and references inside
//! comments are substituted too (write `$${VAR}` there to keep them literal).

use super::error::{ConfigIssue, Location};

/// Substitutes every reference in `text`, looking variables up with `env`.
/// Returns every problem found, not just the first.
pub(crate) fn interpolate(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<ConfigIssue>> {
    let mut out = String::with_capacity(text.len());
    let mut issues = Vec::new();
    for (line_index, line) in text.split_inclusive('\n').enumerate() {
        interpolate_line(line, line_index + 1, env, &mut out, &mut issues);
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}

fn interpolate_line(
    line: &str,
    line_number: usize,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut String,
    issues: &mut Vec<ConfigIssue>,
) {
    let mut rest = line;
    let mut column = 1;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        column += rest[..dollar].chars().count();
        let after = &rest[dollar + 1..];
        let location = Some(Location {
            line: line_number,
            column,
        });
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            column += 2;
        } else if let Some(body_and_tail) = after.strip_prefix('{') {
            let Some(close) = body_and_tail.find('}') else {
                issues.push(issue(
                    location,
                    "unterminated `${`: close the reference with `}` or write `$$` for a literal `$`",
                ));
                out.push_str(&rest[dollar..]);
                return;
            };
            let body = &body_and_tail[..close];
            match substitute(body, env) {
                Ok(value) => out.push_str(&value),
                Err(message) => issues.push(issue(location, message)),
            }
            rest = &body_and_tail[close + 1..];
            column += body.chars().count() + 3;
        } else {
            out.push('$');
            rest = after;
            column += 1;
        }
    }
    out.push_str(rest);
}

fn issue(location: Option<Location>, message: impl Into<String>) -> ConfigIssue {
    ConfigIssue {
        path: String::new(),
        message: message.into(),
        location,
    }
}

/// The value of one reference's body (what is between `${` and `}`).
fn substitute(body: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let (name, default) = match body.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (body, None),
    };
    if !is_variable_name(name) {
        return Err(format!(
            "`${{{body}}}` is not a valid reference: write `${{NAME}}` or `${{NAME:-default}}` \
             where NAME is letters, digits and `_` not starting with a digit, \
             or `$$` for a literal `$`"
        ));
    }
    match (env(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_owned()),
        (None, None) => Err(format!(
            "environment variable `{name}` is not set and `${{{name}}}` has no default; \
             set {name} or write `${{{name}:-default}}`"
        )),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "DB_HOST" => Some("db.internal".into()),
            "EMPTY" => Some(String::new()),
            "PORT" => Some("6543".into()),
            _ => None,
        }
    }

    fn run(text: &str) -> Result<String, Vec<String>> {
        interpolate(text, &env).map_err(|issues| issues.iter().map(|i| i.to_string()).collect())
    }

    #[test]
    fn substitutes_set_variables() {
        assert_eq!(
            run("host: ${DB_HOST}\nport: ${PORT}\n").unwrap(),
            "host: db.internal\nport: 6543\n"
        );
    }

    #[test]
    fn default_used_when_unset_or_empty_but_not_when_set() {
        assert_eq!(
            run("a: ${NOPE:-fallback}\nb: ${EMPTY:-x}\nc: ${DB_HOST:-unused}\nd: ${NOPE:-}")
                .unwrap(),
            "a: fallback\nb: x\nc: db.internal\nd: "
        );
    }

    #[test]
    fn plain_reference_to_empty_variable_is_empty() {
        assert_eq!(run("a: '${EMPTY}'").unwrap(), "a: ''");
    }

    #[test]
    fn double_dollar_is_a_literal_dollar() {
        assert_eq!(
            run("password: pa$$word\nkeep: $${DB_HOST}\n").unwrap(),
            "password: pa$word\nkeep: ${DB_HOST}\n"
        );
    }

    #[test]
    fn lone_dollar_is_kept() {
        assert_eq!(run("p: a$b $ c$").unwrap(), "p: a$b $ c$");
    }

    #[test]
    fn default_may_contain_colons_and_slashes() {
        assert_eq!(
            run("url: ${NOPE:-postgres://u:p@localhost:5432/db}").unwrap(),
            "url: postgres://u:p@localhost:5432/db"
        );
    }

    #[test]
    fn unset_variable_without_default_names_variable_and_line() {
        let errors = run("a: 1\nhost: ${DB_HOST}\npassword: \"${DB_PASSWORD}\"\n").unwrap_err();
        assert_eq!(
            errors,
            vec![
                "environment variable `DB_PASSWORD` is not set and `${DB_PASSWORD}` has no default; \
                 set DB_PASSWORD or write `${DB_PASSWORD:-default}` (line 3, column 12)"
            ]
        );
    }

    #[test]
    fn every_unset_variable_is_reported() {
        let errors = run("a: ${ONE}\nb: ${TWO} ${THREE}\n").unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[2].contains("`THREE`") && errors[2].ends_with("(line 2, column 11)"));
    }

    #[test]
    fn columns_count_characters_after_earlier_references() {
        let errors = run("é: ${DB_HOST} $$ ${NOPE}").unwrap_err();
        assert!(errors[0].ends_with("(line 1, column 18)"), "{errors:?}");
    }

    #[test]
    fn malformed_references_are_errors() {
        let errors = run("a: ${1BAD}\nb: ${OPEN\nc: ${}\n").unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("`${1BAD}` is not a valid reference"));
        assert!(errors[0].ends_with("(line 1, column 4)"));
        assert!(errors[1].starts_with("unterminated `${`"));
        assert!(errors[1].ends_with("(line 2, column 4)"));
        assert!(errors[2].starts_with("`${}` is not a valid reference"));
    }
}
