//! The on-disk cache of compiled components.
//!
//! An entry is named by the SHA-256 of the component's bytes and of the
//! engine's compatibility hash (wasmtime version and every setting that
//! changes generated code), so a new wasmtime or a new config never loads a
//! stale artifact. wasmtime checks the artifact's header again on load; an
//! entry that fails to load is recompiled and replaced.
//!
//! Loading an entry memory-maps native code from the cache directory: the
//! directory must be writable only by weft (it is as trusted as the weft
//! binary), and entries are only ever replaced by rename, never rewritten in
//! place (truncating a mapped file would crash the process with SIGBUS).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;
use weft_core::fs::write_atomically;

/// Where a component came from on load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Compiled now (and stored in the cache).
    Compiled,
    /// Loaded from the cache.
    Cached,
}

/// A directory of precompiled components.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    dir: PathBuf,
    /// Hex SHA-256 of the engine's compatibility hash.
    engine_key: String,
}

impl ComponentCache {
    /// Creates the directory if needed.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(ComponentCache {
            dir: dir.to_path_buf(),
            engine_key: hex::encode(hasher.0.finalize()),
        })
    }

    /// The compiled component for `wasm`, from the cache or compiled now.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, Origin)> {
        let mut digest = Sha256::new();
        digest.update(self.engine_key.as_bytes());
        digest.update(wasm);
        let entry = self
            .dir
            .join(format!("{}.cwasm", hex::encode(digest.finalize())));

        if entry.is_file() {
            // SAFETY: the entry was written by `precompile_component` of an
            // engine with the same compatibility hash, into a directory only
            // weft writes (see the module docs). wasmtime validates the header.
            match unsafe { Component::deserialize_file(engine, &entry) } {
                Ok(component) => return Ok((component, Origin::Cached)),
                Err(error) => {
                    tracing::warn!(entry = %entry.display(), %error, "discarding unusable compiled-component cache entry");
                }
            }
        }

        let compiled = engine.precompile_component(wasm)?;
        // SAFETY: the bytes were produced just above by this very engine.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        if let Err(error) = write_atomically(&entry, &compiled) {
            tracing::warn!(entry = %entry.display(), %error, "cannot store compiled component; it will be recompiled next time");
        }
        Ok((component, Origin::Compiled))
    }
}

/// Feeds `Hash` output into SHA-256, which is stable across Rust versions
/// (unlike `DefaultHasher`).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        unreachable!("only the digest is used")
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
