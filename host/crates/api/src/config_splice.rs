//! Rewrites one top-level list of a config's YAML text entry by entry,
//! keeping every other byte as written: comments, blank lines, quoting and
//! the order of keys outside the entries that changed.
//!
//! Only block-style lists (`sinks:` then `- name: ...` lines) are spliced.
//! Anything else (a flow list, anchors the entries depend on, a layout
//! this reader does not follow) answers `None`, and the caller writes the
//! whole document from its parsed form instead. The caller also re-parses
//! what this answers and keeps it only if it is the intended document, so
//! a misread layout can cost comments but never change the config.

use serde_yaml_ng::Value as Yaml;

/// `text` with its top-level list `section` holding `entries`: an entry
/// equal to one of `old` (the list `text` holds now) keeps its text and
/// the comments above it; one that replaces an entry of the same `name`
/// keeps the comments above it and is written afresh; any other is
/// written afresh at the list's indent. `None` when the list is not laid
/// out as block-style entries.
pub(super) fn splice_section(
    text: &str,
    section: &str,
    old: &[Yaml],
    entries: &[Yaml],
) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let Some(key_line) = lines.iter().position(|line| is_key_line(line, section)) else {
        return append_section(text, section, entries);
    };
    let body_start = key_line + 1;
    match value_after_key(lines[key_line], section) {
        "" => {}
        // An empty flow list (`sinks: []`) becomes a block list.
        "[]" if old.is_empty() => {
            let list = block_list(section, entries)?;
            return Some(lines[..key_line].concat() + &list + &lines[body_start..].concat());
        }
        // A flow list with items: nothing to splice into.
        _ => return None,
    }
    let body_end = lines[body_start..]
        .iter()
        .position(|line| ends_section(line))
        .map_or(lines.len(), |at| body_start + at);
    let layout = Layout::read(&lines[body_start..body_end])?;
    if layout.entries.len() != old.len() {
        return None;
    }
    let parsed: Vec<Yaml> = layout
        .entries
        .iter()
        .map(|entry| parse_entry(&entry.body))
        .collect::<Option<_>>()?;
    if parsed != old {
        return None;
    }

    let mut out = lines[..body_start].concat();
    out.push_str(&layout.before);
    for entry in entries {
        if let Some(kept) = parsed.iter().position(|kept| kept == entry) {
            out.push_str(&layout.entries[kept].leading);
            out.push_str(&layout.entries[kept].body);
            continue;
        }
        let name = entry.get("name");
        if let Some(replaced) = parsed
            .iter()
            .position(|kept| name.is_some() && kept.get("name") == name)
        {
            out.push_str(&layout.entries[replaced].leading);
        }
        out.push_str(&render_entry(entry, layout.indent)?);
    }
    out.push_str(&layout.after);
    out.push_str(&lines[body_end..].concat());
    Some(out)
}

/// The entries of a block list, as text.
struct Layout {
    /// Columns before each entry's `-`.
    indent: usize,
    /// Blank and comment lines before the first entry.
    before: String,
    entries: Vec<EntryText>,
    /// Blank and comment lines after the last entry.
    after: String,
}

struct EntryText {
    /// Blank and comment lines above the entry, which go where it goes.
    leading: String,
    /// From the `-` line to the entry's last line of content.
    body: String,
}

impl Layout {
    /// Reads the lines of a list's body; `None` unless every content line
    /// belongs to a `-` entry at one indent.
    fn read(lines: &[&str]) -> Option<Layout> {
        let indent = lines
            .iter()
            .find(|line| !is_trivia(line))
            .map_or(2, |line| column(line));
        let mut layout = Layout {
            indent,
            before: String::new(),
            entries: Vec::new(),
            after: String::new(),
        };
        let mut pending = String::new();
        for line in lines {
            if is_trivia(line) {
                pending.push_str(line);
                continue;
            }
            let column = column(line);
            if column == indent && is_dash(&line[column..]) {
                let mut leading = std::mem::take(&mut pending);
                if layout.entries.is_empty() {
                    // Comments right above the first entry are its own;
                    // those above a blank line belong to the list.
                    let own = own_comments_at(&leading);
                    layout.before = leading[..own].to_string();
                    leading.drain(..own);
                }
                layout.entries.push(EntryText {
                    leading,
                    body: line.to_string(),
                });
            } else if column > indent {
                // Inside the last entry, comment lines within it included.
                let entry = layout.entries.last_mut()?;
                entry.body.push_str(&std::mem::take(&mut pending));
                entry.body.push_str(line);
            } else {
                return None;
            }
        }
        layout.after = pending;
        Some(layout)
    }
}

/// Where the comment lines directly above an entry (no blank line
/// between) begin in `trivia`, the lines before it.
fn own_comments_at(trivia: &str) -> usize {
    let mut own = trivia.len();
    for line in trivia.split_inclusive('\n').rev() {
        if line.trim().is_empty() {
            break;
        }
        own -= line.len();
    }
    own
}

/// `text` with `section:` and its entries added at the end.
fn append_section(text: &str, section: &str, entries: &[Yaml]) -> Option<String> {
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&block_list(section, entries)?);
    Some(out)
}

/// `section:` and its entries as a block list, two columns in.
fn block_list(section: &str, entries: &[Yaml]) -> Option<String> {
    let mut out = format!("{section}:\n");
    for entry in entries {
        out.push_str(&render_entry(entry, 2)?);
    }
    Some(out)
}

/// `entry` as a block-list item whose `-` stands `indent` columns in.
fn render_entry(entry: &Yaml, indent: usize) -> Option<String> {
    let text = serde_yaml_ng::to_string(&Yaml::Sequence(vec![entry.clone()])).ok()?;
    let pad = " ".repeat(indent);
    Some(
        text.split_inclusive('\n')
            .map(|line| format!("{pad}{line}"))
            .collect(),
    )
}

/// The one item of a block-list entry's text.
fn parse_entry(body: &str) -> Option<Yaml> {
    let mut items: Vec<Yaml> = serde_yaml_ng::from_str(body).ok()?;
    (items.len() == 1).then(|| items.remove(0))
}

/// Whether `line` is `section:` at the top level.
fn is_key_line(line: &str, section: &str) -> bool {
    line.strip_prefix(section)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// What follows `section:` on its line, without a trailing comment.
fn value_after_key<'a>(line: &'a str, section: &str) -> &'a str {
    let rest = &line[section.len() + 1..];
    let value = match rest.find(" #").or_else(|| rest.find("\t#")) {
        Some(comment) => &rest[..comment],
        None => rest,
    };
    value.trim()
}

/// Whether `line` starts the next top-level key (or document), which ends
/// a list whose entries may stand at column 0.
fn ends_section(line: &str) -> bool {
    !is_trivia(line) && !line.starts_with(' ') && !is_dash(line)
}

/// A blank or comment-only line.
fn is_trivia(line: &str) -> bool {
    let content = line.trim();
    content.is_empty() || content.starts_with('#')
}

/// Whether `content` (a line from its first non-space) opens a list item.
fn is_dash(content: &str) -> bool {
    content
        .strip_prefix('-')
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Spaces before the line's content.
fn column(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str, section: &str) -> Vec<Yaml> {
        let document: Yaml = serde_yaml_ng::from_str(text).unwrap();
        match document.get(section) {
            Some(Yaml::Sequence(entries)) => entries.clone(),
            _ => Vec::new(),
        }
    }

    fn entry(text: &str) -> Yaml {
        serde_yaml_ng::from_str(text).unwrap()
    }

    /// Splices `entries` into `text`, checking that the result parses to
    /// `text`'s document with the list replaced.
    fn splice(text: &str, section: &str, entries: &[Yaml]) -> String {
        let old = list(text, section);
        let spliced = splice_section(text, section, &old, entries).expect("splices");
        let mut intended: Yaml = match serde_yaml_ng::from_str(text).unwrap() {
            Yaml::Null => Yaml::Mapping(Default::default()),
            document => document,
        };
        intended
            .as_mapping_mut()
            .unwrap()
            .insert(section.into(), Yaml::Sequence(entries.to_vec()));
        let got: Yaml = serde_yaml_ng::from_str(&spliced).unwrap();
        assert_eq!(got, intended, "{spliced}");
        spliced
    }

    const CONFIG: &str = "\
# weft for the shop
databases:
  - name: shop # the primary
    url: ${SHOP_URL}

sinks:
  # orders go to the warehouse
  - name: orders
    database: shop
    tables: [orders]   # only orders
    destination: {type: sequin_stream}

  # users, for the CRM
  - name: users
    database: shop
    tables: [users]
    destination:
      type: webhook
      # the CRM's endpoint
      http_endpoint: crm

# the end
http_endpoints:
  - name: crm
    url: http://127.0.0.1:9/
";

    #[test]
    fn a_new_entry_is_added_below_the_others_and_every_comment_stays() {
        let mut entries = list(CONFIG, "sinks");
        entries.push(entry(
            "{name: audit, database: shop, tables: [audit], destination: {type: sequin_stream}}",
        ));
        let spliced = splice(CONFIG, "sinks", &entries);
        let (before, after) = spliced.split_once("  - name: audit\n").expect("appended");
        assert_eq!(before, &CONFIG[..CONFIG.find("\n# the end").unwrap()]);
        assert!(after.contains("# the end\nhttp_endpoints:"), "{spliced}");
        for comment in [
            "# weft for the shop",
            "# the primary",
            "# orders go to the warehouse",
            "# only orders",
            "# the CRM's endpoint",
            "${SHOP_URL}",
        ] {
            assert!(spliced.contains(comment), "{comment} lost:\n{spliced}");
        }
    }

    #[test]
    fn a_replaced_entry_is_written_afresh_in_its_place_and_its_neighbours_keep_their_text() {
        let mut entries = list(CONFIG, "sinks");
        entries[0] = entry(
            "{name: orders, database: shop, tables: [orders, refunds], destination: {type: sequin_stream}}",
        );
        let spliced = splice(CONFIG, "sinks", &entries);
        let orders = spliced.find("- name: orders").unwrap();
        let users = spliced.find("- name: users").unwrap();
        assert!(orders < users, "{spliced}");
        assert!(
            spliced.contains("  # orders go to the warehouse\n  - name: orders\n"),
            "{spliced}"
        );
        assert!(
            !spliced.contains("# only orders"),
            "the replaced entry's own comments go: {spliced}"
        );
        assert!(
            spliced.contains("  # users, for the CRM\n  - name: users\n"),
            "{spliced}"
        );
        assert!(
            spliced.contains("      # the CRM's endpoint\n"),
            "{spliced}"
        );
        assert!(
            spliced.contains("    tables: [users]\n"),
            "kept as written: {spliced}"
        );
    }

    #[test]
    fn a_deleted_entry_takes_only_its_own_comments_along() {
        let mut entries = list(CONFIG, "sinks");
        entries.remove(0);
        let spliced = splice(CONFIG, "sinks", &entries);
        assert!(!spliced.contains("orders go to"), "{spliced}");
        assert!(
            spliced.contains("sinks:\n\n  # users, for the CRM\n  - name: users\n"),
            "{spliced}"
        );
        assert!(
            spliced.contains("# weft for the shop") && spliced.contains("# the end"),
            "{spliced}"
        );
    }

    #[test]
    fn entries_at_column_zero_and_a_missing_or_empty_list_are_handled() {
        let flush =
            "sinks:\n# first\n- name: a\n  tables: [a]\n- name: b\n  tables: [b]\nfunctions: []\n";
        let mut entries = list(flush, "sinks");
        entries.push(entry("{name: c, tables: [c]}"));
        let spliced = splice(flush, "sinks", &entries);
        assert!(
            spliced.starts_with(
                "sinks:\n# first\n- name: a\n  tables: [a]\n- name: b\n  tables: [b]\n- name: c\n"
            ),
            "{spliced}"
        );

        let spliced = splice(flush, "functions", &[entry("{name: f, kind: filter}")]);
        assert!(
            spliced.contains("# first") && spliced.contains("functions:\n  - name: f\n"),
            "{spliced}"
        );

        let spliced = splice(
            "# only a comment\n",
            "api_tokens",
            &[entry("{name: t, token_sha256: ab}")],
        );
        assert!(
            spliced.starts_with("# only a comment\napi_tokens:\n  - name: t\n"),
            "{spliced}"
        );

        let spliced = splice(
            "sinks:   # none yet\n\n# after\nfunctions: []\n",
            "sinks",
            &[entry("{name: a}")],
        );
        assert!(
            spliced.contains("# none yet") && spliced.contains("# after"),
            "{spliced}"
        );
    }

    #[test]
    fn layouts_it_cannot_follow_are_left_to_the_caller() {
        let flow = "sinks: [{name: a}, {name: b}]\n";
        assert_eq!(
            splice_section(flow, "sinks", &list(flow, "sinks"), &[]),
            None
        );
        let uneven = "sinks:\n  - name: a\n - name: b\n";
        assert_eq!(
            splice_section(
                uneven,
                "sinks",
                &[entry("{name: a}"), entry("{name: b}")],
                &[]
            ),
            None
        );
        // The caller's view of the list differs from the text's: refuse.
        let text = "sinks:\n  - name: a\n";
        assert_eq!(
            splice_section(text, "sinks", &[entry("{name: z}")], &[]),
            None
        );
    }
}
