//! The project templates, compiled into the binary from
//! `host/templates/plugin/` and `wit/`, and the few substitutions they take.

use super::{Kind, Lang, Marker, ProjectError};

/// The `weft:plugin` WIT package, copied into every project as `wit/`.
const WIT: [(&str, &str); 3] = [
    ("wit/types.wit", include_str!("../../../wit/types.wit")),
    ("wit/worlds.wit", include_str!("../../../wit/worlds.wit")),
    (
        "wit/capabilities.wit",
        include_str!("../../../wit/capabilities.wit"),
    ),
];

const README: &str = include_str!("../../templates/plugin/README.md");
const RUST_CARGO: &str = include_str!("../../templates/plugin/rust/Cargo.toml");
/// The toolchain file of the weft repository, so that a Rust project builds
/// with the same channel and has the wasm32-wasip2 target.
const RUST_TOOLCHAIN: &str = include_str!("../../../rust-toolchain.toml");

/// `(language, kind, path in the project, template)` of every source file.
const SOURCES: [(Lang, Kind, &str, &str); 10] = [
    (
        Lang::Rust,
        Kind::Filter,
        "src/lib.rs",
        include_str!("../../templates/plugin/rust/filter.rs"),
    ),
    (
        Lang::Rust,
        Kind::Transform,
        "src/lib.rs",
        include_str!("../../templates/plugin/rust/transform.rs"),
    ),
    (
        Lang::Rust,
        Kind::Routing,
        "src/lib.rs",
        include_str!("../../templates/plugin/rust/routing.rs"),
    ),
    (
        Lang::Rust,
        Kind::Enrichment,
        "src/lib.rs",
        include_str!("../../templates/plugin/rust/enrichment.rs"),
    ),
    (
        Lang::Js,
        Kind::Filter,
        "plugin.js",
        include_str!("../../templates/plugin/js/filter.js"),
    ),
    (
        Lang::Js,
        Kind::Transform,
        "plugin.js",
        include_str!("../../templates/plugin/js/transform.js"),
    ),
    (
        Lang::Python,
        Kind::Filter,
        "app.py",
        include_str!("../../templates/plugin/python/filter.py"),
    ),
    (
        Lang::Python,
        Kind::Transform,
        "app.py",
        include_str!("../../templates/plugin/python/transform.py"),
    ),
    (
        Lang::C,
        Kind::Filter,
        "plugin.c",
        include_str!("../../templates/plugin/c/filter.c"),
    ),
    (
        Lang::C,
        Kind::Transform,
        "plugin.c",
        include_str!("../../templates/plugin/c/transform.c"),
    ),
];

/// The kinds `lang` has templates for, e.g. `filter, transform`.
fn supported(lang: Lang) -> String {
    let kinds: Vec<&str> = SOURCES
        .iter()
        .filter(|(l, ..)| *l == lang)
        .map(|(_, kind, ..)| kind.as_str())
        .collect();
    kinds.join(", ")
}

/// The error for a kind that is unknown or has no template in `lang`.
pub(crate) fn unsupported(kind: &str, lang: Lang) -> ProjectError {
    ProjectError::UnknownKind {
        kind: kind.to_string(),
        lang: lang.to_string(),
        supported: supported(lang),
    }
}

/// The path of the source file a project of `lang` edits.
pub(crate) fn source_path(lang: Lang) -> &'static str {
    SOURCES
        .iter()
        .find(|(l, ..)| *l == lang)
        .map(|(.., path, _)| *path)
        .expect("every language has a template")
}

/// Every file of a new project, as `(relative path, contents)`.
/// `sdk_dependency` is the Cargo.toml dependency line for Rust projects.
pub(crate) fn project_files(
    marker: &Marker,
    sdk_dependency: &str,
) -> Result<Vec<(&'static str, String)>, ProjectError> {
    let (_, _, source, template) = SOURCES
        .iter()
        .find(|(lang, kind, ..)| *lang == marker.lang && *kind == marker.kind)
        .ok_or_else(|| unsupported(marker.kind.as_str(), marker.lang))?;
    let fill = |text: &str| {
        text.replace("{{name}}", &marker.name)
            .replace("{{kind}}", marker.kind.as_str())
            .replace("{{sdk_dependency}}", sdk_dependency)
            .replace("{{lang_title}}", lang_title(marker.lang))
            .replace("{{source}}", source)
            .replace("{{toolchain_note}}", toolchain_note(marker.lang))
    };
    let mut files = vec![
        (super::MARKER_FILE, marker.render()),
        ("README.md", fill(README)),
        (*source, fill(template)),
        (
            ".gitignore",
            "*.wasm\n/target/\n/build/\n__pycache__/\n".to_string(),
        ),
    ];
    files.extend(WIT.iter().map(|(path, text)| (*path, text.to_string())));
    if marker.lang == Lang::Rust {
        files.push(("Cargo.toml", fill(RUST_CARGO)));
        files.push(("rust-toolchain.toml", RUST_TOOLCHAIN.to_string()));
    }
    Ok(files)
}

fn lang_title(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "Rust",
        Lang::Js => "JavaScript",
        Lang::Python => "Python",
        Lang::C => "C",
    }
}

fn toolchain_note(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => {
            "It runs `cargo build --target wasm32-wasip2 --release` (the target\ncomes from rust-toolchain.toml)."
        }
        _ => {
            "It uses the pinned toolchains that `scripts/build-examples.sh` of a weft\ncheckout installs (run it once; `weft plugin build` says so when they\nare missing)."
        }
    }
}
