//! `weft plugin new|build|push|ls|rm`: create and build plugins
//! (WebAssembly functions) locally, and manage a running weft's plugin
//! registry.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::remote::table::render;
use super::remote::{Output, Remote, RemoteArgs, pretty, rows, text};

#[derive(Subcommand)]
/// `weft plugin ...`.
pub enum PluginCommand {
    /// Scaffold a buildable plugin project in a new folder.
    New {
        /// The language: rust, js, python or c.
        #[arg(long)]
        lang: String,
        /// The function kind: filter or transform (Rust also: routing,
        /// enrichment).
        #[arg(long, default_value = "filter")]
        kind: String,
        /// The folder to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Rust only: the sdk-guest folder of a weft checkout (default: the
        /// checkout the project is inside, else the one weft was built from).
        #[arg(long)]
        sdk_path: Option<PathBuf>,
        /// The plugin's name: lowercase letters, digits and dashes.
        name: String,
    },
    /// Build the project in DIR to a component, DIR/<name>.wasm.
    Build {
        /// The project folder (holding weft-plugin.toml).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Upload a component to a running weft's plugin registry.
    Push {
        /// The component (.wasm).
        file: PathBuf,
        /// The version to register it as: NAME@VERSION.
        #[arg(long = "as")]
        reference: String,
        /// The function kind it implements: transform, filter, routing or
        /// enrichment.
        #[arg(long)]
        kind: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List a running weft's registered plugins.
    Ls {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Delete a registered plugin version (refused while a function uses it).
    Rm {
        /// NAME@VERSION.
        reference: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

impl PluginCommand {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match self {
            PluginCommand::Push {
                file,
                reference,
                kind,
                remote,
            } => remote.run(|r, out| async move { push(&r, &file, &reference, &kind, out).await }),
            PluginCommand::Ls { remote } => remote.run(|r, out| async move { ls(&r, out).await }),
            PluginCommand::Rm { reference, remote } => {
                remote.run(|r, out| async move { rm(&r, &reference, out).await })
            }
            command => local(command),
        }
    }
}

/// `weft plugin ...`: the path made or built on stdout, errors on stderr
/// (exit status 2).
fn local(command: PluginCommand) -> ExitCode {
    use crate::plugin_project as project;
    let result = match command {
        PluginCommand::New {
            lang,
            kind,
            dir,
            sdk_path,
            name,
        } => lang.parse::<project::Lang>().and_then(|lang| {
            let kind = project::Kind::parse(&kind, lang)?;
            project::scaffold(&project::NewProject {
                name,
                lang,
                kind,
                dir,
                sdk_path,
            })
        }),
        PluginCommand::Build { dir } => project::build(&dir),
        PluginCommand::Push { .. } | PluginCommand::Ls { .. } | PluginCommand::Rm { .. } => {
            unreachable!("remote plugin commands are run by PluginCommand::run")
        }
    };
    match result {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("weft: {error}");
            ExitCode::from(2)
        }
    }
}

/// `plugin push FILE --name N --version V --kind K`.
async fn push(
    remote: &Remote,
    file: &std::path::Path,
    reference: &str,
    kind: &str,
    output: Output,
) -> Result<String, String> {
    let (name, version) = reference.split_once('@').ok_or_else(|| {
        format!("{reference:?}: name the version to push as name@version, e.g. mask-pii@1.2.0")
    })?;
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let query = [("name", name), ("version", version), ("kind", kind)];
    let body = remote.post_wasm("/api/plugins", &query, bytes).await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(format!(
        "plugin {}: {} {} bytes, sha256 {}\n",
        text(&body["reference"]),
        text(&body["kind"]),
        text(&body["bytes"]),
        text(&body["sha256"])
    ))
}

/// `plugin ls`.
async fn ls(remote: &Remote, output: Output) -> Result<String, String> {
    let body = remote.get("/api/plugins").await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let table: Vec<Vec<String>> = rows(&body)
        .iter()
        .map(|plugin| {
            let imports = plugin["imports"]
                .as_array()
                .map(|list| list.iter().map(text).collect::<Vec<_>>().join(","))
                .filter(|list| !list.is_empty())
                .unwrap_or_else(|| "-".into());
            vec![
                text(&plugin["name"]),
                text(&plugin["version"]),
                text(&plugin["kind"]),
                text(&plugin["bytes"]),
                text(&plugin["sha256"]).chars().take(12).collect(),
                imports,
            ]
        })
        .collect();
    Ok(render(
        &["NAME", "VERSION", "KIND", "BYTES", "SHA256", "IMPORTS"],
        &table,
    ))
}

/// `plugin rm NAME@VERSION`.
async fn rm(remote: &Remote, reference: &str, output: Output) -> Result<String, String> {
    let (name, version) = reference
        .split_once('@')
        .ok_or_else(|| format!("{reference:?}: name the version to remove as name@version"))?;
    let body = remote
        .delete(&format!("/api/plugins/{name}/{version}"))
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(format!("plugin {name}@{version}: deleted\n"))
}
