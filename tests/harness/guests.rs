//! Builds the WebAssembly guests once per test run and finds their files.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The directory `scripts/build-guests.sh` writes components to.
fn guest_dir() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let output = Command::new("bash")
            .arg(root.join("scripts/build-guests.sh"))
            .current_dir(&root)
            .output()
            .expect("run scripts/build-guests.sh");
        assert!(
            output.status.success(),
            "scripts/build-guests.sh failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        target.join("guests/wasm32-wasip2/guest")
    })
}

/// The component built from the guest crate whose library is `name`
/// (underscored, e.g. `upcase_transform`).
pub fn wasm(name: &str) -> PathBuf {
    let path = guest_dir().join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "guest component {} was not built",
        path.display()
    );
    path
}

/// The languages of the `examples/*/even-filter` components, in the order
/// `scripts/build-examples.sh` prints their paths.
pub const EXAMPLE_LANGUAGES: [&str; 4] = ["rust", "js", "python", "c"];

/// The even-id filter example built in each of [`EXAMPLE_LANGUAGES`], as
/// `(language, component path)`. Runs `scripts/build-examples.sh` once per
/// test run (it installs missing toolchains and rebuilds only what changed).
pub fn even_filter_examples() -> &'static [(&'static str, PathBuf)] {
    static BUILT: OnceLock<Vec<(&'static str, PathBuf)>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let output = Command::new("bash")
            .arg(root.join("scripts/build-examples.sh"))
            .current_dir(&root)
            .output()
            .expect("run scripts/build-examples.sh");
        assert!(
            output.status.success(),
            "scripts/build-examples.sh failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let paths: Vec<PathBuf> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(PathBuf::from)
            .collect();
        assert_eq!(
            paths.len(),
            EXAMPLE_LANGUAGES.len(),
            "scripts/build-examples.sh printed {paths:?}"
        );
        EXAMPLE_LANGUAGES.into_iter().zip(paths).collect()
    })
}
