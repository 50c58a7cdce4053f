//! The Python tools the tests use (fastavro, schemathesis, moto), installed
//! in a venv by `scripts/ensure-python-tools.sh` once per run.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The venv's python.
pub fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| PathBuf::from(super::guests::run_script("ensure-python-tools.sh").trim()))
}

/// The venv's `name` command (e.g. `schemathesis`).
pub fn command(name: &str) -> PathBuf {
    python().with_file_name(name)
}
