//! `weft-plugin.toml`: the marker that makes a folder a plugin project.
//!
//! Three `key = "value"` lines (`name`, `lang`, `kind`); `#` starts a
//! comment. A full TOML parser would be a dependency for three strings.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::ProjectError;
use super::error::io;

/// The marker's file name, at the root of a project.
pub const MARKER_FILE: &str = "weft-plugin.toml";

/// The language a plugin is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Rust with `weft-sdk-guest`, built by cargo for wasm32-wasip2.
    Rust,
    /// JavaScript, built by componentize-js.
    Js,
    /// Python, built by componentize-py.
    Python,
    /// C, built by wit-bindgen, clang with wasi-libc and wasm-tools.
    C,
}

impl Lang {
    /// Every language, in the order the docs list them.
    pub const ALL: [Lang; 4] = [Lang::Rust, Lang::Js, Lang::Python, Lang::C];

    /// The name used on the command line and in the marker.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Js => "js",
            Lang::Python => "python",
            Lang::C => "c",
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Lang {
    type Err = ProjectError;
    fn from_str(s: &str) -> Result<Self, ProjectError> {
        Lang::ALL
            .into_iter()
            .find(|lang| lang.as_str() == s)
            .ok_or_else(|| ProjectError::UnknownLang(s.to_string()))
    }
}

/// The kind of function a plugin is (its WIT world).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Keeps or drops each change.
    Filter,
    /// Turns each change into the payload a sink sends.
    Transform,
    /// Chooses where a sink sends each change.
    Routing,
    /// Adds data to a change's `metadata.enrichment`.
    Enrichment,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [
        Kind::Filter,
        Kind::Transform,
        Kind::Routing,
        Kind::Enrichment,
    ];

    /// The name used on the command line, in the marker and in WIT.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Filter => "filter",
            Kind::Transform => "transform",
            Kind::Routing => "routing",
            Kind::Enrichment => "enrichment",
        }
    }

    /// Parses a kind; `lang` only words the error.
    pub fn parse(s: &str, lang: Lang) -> Result<Kind, ProjectError> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| super::templates::unsupported(s, lang))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `weft-plugin.toml` says about a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The project's name; the component is `<name>.wasm`.
    pub name: String,
    /// The language.
    pub lang: Lang,
    /// The function kind.
    pub kind: Kind,
}

impl Marker {
    /// The marker's text.
    pub fn render(&self) -> String {
        format!(
            "# A weft plugin project: `weft plugin build` reads this file.\nname = \"{}\"\nlang = \"{}\"\nkind = \"{}\"\n",
            self.name, self.lang, self.kind
        )
    }

    /// Reads the marker of the project in `dir`.
    pub fn read(dir: &Path) -> Result<Marker, ProjectError> {
        let path = dir.join(MARKER_FILE);
        if !path.is_file() {
            return Err(ProjectError::NoMarker(dir.to_path_buf()));
        }
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        Marker::parse(&text).map_err(|reason| ProjectError::BadMarker { path, reason })
    }

    fn parse(text: &str) -> Result<Marker, String> {
        let (mut name, mut lang, mut kind) = (None, None, None);
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let at = |what: &str| format!("line {}: {what}", number + 1);
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| at("expected `key = \"value\"`"))?;
            let value = value
                .trim()
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| at("the value must be a double-quoted string"))?;
            let slot = match key.trim() {
                "name" => &mut name,
                "lang" => &mut lang,
                "kind" => &mut kind,
                other => return Err(at(&format!("unknown key `{other}` (name, lang, kind)"))),
            };
            *slot = Some(value.to_string());
        }
        let missing = |key| format!("missing `{key} = \"...\"`");
        let name = name.ok_or_else(|| missing("name"))?;
        super::scaffold::check_name(&name).map_err(|e| e.to_string())?;
        let lang: Lang = lang
            .ok_or_else(|| missing("lang"))?
            .parse()
            .map_err(|e: ProjectError| e.to_string())?;
        let kind =
            Kind::parse(&kind.ok_or_else(|| missing("kind"))?, lang).map_err(|e| e.to_string())?;
        Ok(Marker { name, lang, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_marker_reads_back() {
        let marker = Marker {
            name: "orders-filter".into(),
            lang: Lang::Python,
            kind: Kind::Transform,
        };
        assert_eq!(Marker::parse(&marker.render()), Ok(marker));
    }

    #[test]
    fn a_bad_marker_names_the_line() {
        assert_eq!(
            Marker::parse("name = \"a\"\nlang = rust\n"),
            Err("line 2: the value must be a double-quoted string".to_string())
        );
        assert_eq!(
            Marker::parse("name = \"a\"\nkind = \"filter\"\n"),
            Err("missing `lang = \"...\"`".to_string())
        );
    }
}
