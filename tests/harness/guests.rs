//! Builds the WebAssembly guests once per test run and finds their files.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `scripts/<script>` from the repository root and returns its
/// stdout; fails the test with its output unless it succeeds.
pub fn run_script(script: &str) -> String {
    let output = Command::new("bash")
        .arg(root().join("scripts").join(script))
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("run scripts/{script}: {e}"));
    assert!(
        output.status.success(),
        "scripts/{script} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The directory `scripts/build-guests.sh` writes components to.
fn guest_dir() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        run_script("build-guests.sh");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target"));
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
        let stdout = run_script("build-examples.sh");
        let paths: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
        assert_eq!(
            paths.len(),
            EXAMPLE_LANGUAGES.len(),
            "scripts/build-examples.sh printed {paths:?}"
        );
        EXAMPLE_LANGUAGES.into_iter().zip(paths).collect()
    })
}
