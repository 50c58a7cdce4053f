//! Plugin projects: `weft plugin new` scaffolds one, `weft plugin build`
//! turns it into a component.
//!
//! A project is a folder with a `weft-plugin.toml` marker (its name,
//! language and kind), the source of one function, and a copy of the
//! `wit/` contract it was made with. The templates are compiled into the
//! binary, so scaffolding never touches the network. Building runs the
//! same commands as `scripts/build-examples.sh`, with the toolchains that
//! script installs (see [`toolchain`]): weft installs nothing itself.

mod build;
mod error;
mod marker;
mod scaffold;
mod templates;
pub mod toolchain;

pub use build::build;
pub use error::ProjectError;
pub use marker::{Kind, Lang, MARKER_FILE, Marker};
pub use scaffold::{NewProject, scaffold};
