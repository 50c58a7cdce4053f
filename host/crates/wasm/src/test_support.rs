//! What tests of this crate and of the layers above share: the real guest
//! components built from the workspace's guest crates, one engine, and a
//! message to call them with. Compiled for this crate's tests and, with the
//! `test-support` feature, for other crates' tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};

use serde_json::Value;
use weft_core::change::Action;
use weft_core::lsn::Lsn;
use weft_core::message::{ConsumerRef, Message, Metadata, idempotency_key};

use crate::{EngineSettings, PluginEngine};

/// The target dir this test binary was built in (`<target>/debug/deps/..`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors()
        .nth(3)
        .expect("target dir above debug/deps")
        .to_path_buf()
}

/// The component built from guest crate `crate_name`, building all guests
/// once per test run.
pub fn guest(crate_name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("scripts/build-guests.sh").is_file())
        .expect("the workspace root holds scripts/build-guests.sh");
    BUILD.call_once(|| {
        let output = std::process::Command::new(root.join("scripts/build-guests.sh"))
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .expect("run scripts/build-guests.sh");
        assert!(
            output.status.success(),
            "scripts/build-guests.sh failed (is the wasm32-wasip2 target installed? `rustup target add wasm32-wasip2`):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
    target_dir().join(format!(
        "guests/wasm32-wasip2/guest/{}.wasm",
        crate_name.replace('-', "_")
    ))
}

/// One engine for all tests: each pooled engine reserves address space.
pub fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<(tempfile::TempDir, PluginEngine)> = OnceLock::new();
    &ENGINE
        .get_or_init(|| {
            let cache = tempfile::tempdir().expect("temp dir");
            let mut settings = EngineSettings::new(cache.path());
            settings.max_instances = 64;
            let engine = PluginEngine::new(settings).expect("engine");
            (cache, engine)
        })
        .1
}

/// A function's `config:` from `pairs`.
pub fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A message of `public.users` with `record` and `changes`.
pub fn message(action: Action, record: Value, changes: Option<Value>) -> Message {
    let as_row = |v: Value| v.as_object().expect("row is an object").clone();
    Message {
        record: as_row(record).into(),
        changes: changes.map(as_row),
        action,
        metadata: Metadata {
            table_schema: "public".into(),
            table_name: "users".into(),
            commit_timestamp: "2024-05-01T12:00:00.123456Z".into(),
            commit_lsn: Lsn(123_456),
            commit_idx: 3,
            idempotency_key: idempotency_key(Lsn(123_456), 3),
            record_pks: vec!["1".into()],
            database_name: "app".into(),
            transaction_annotations: None,
            enrichment: None,
            webhook_source: None,
            consumer: ConsumerRef::for_sink("orders-out"),
        },
    }
}
