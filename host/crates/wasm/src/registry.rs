//! The plugin registry: components uploaded through `POST /api/plugins` as
//! `name@version`, checked, stored content-addressed and precompiled, for
//! functions to name with `plugin: name@version` instead of a `file`.
//!
//! * An upload is refused unless it is a component that implements the
//!   declared kind's world and links against the host, and imports no
//!   capability outside `plugin_registry.allow_capabilities`: a precise
//!   error lists what is wrong (missing exports, offending imports).
//! * The bytes land in `<data dir>/plugins/<sha256>.wasm`, written to a
//!   temporary file and renamed; the compiled artifact goes to the engine's
//!   cache on the way, so the first sink that loads it starts warm.
//! * A version is immutable: registering `name@version` again with other
//!   bytes is a conflict; with the same bytes it changes nothing.
//! * A version that a function of the running config names cannot be
//!   deleted.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{PluginEngine, PluginError};
use weft_config::Config;
use weft_config::plugin_registry::{PluginRef, PluginRegistryConfig};
use weft_store::{RegisteredPlugin, Registration, Store, StoreError};

/// Why the registry refused a request.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A request field is malformed.
    #[error("{field}: {message}")]
    Invalid {
        /// The field (`name`, `version`, `kind`, `body`).
        field: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The body is not an acceptable component for its kind.
    #[error(transparent)]
    Rejected(#[from] PluginError),
    /// The component imports host capabilities the policy does not allow.
    #[error(
        "the component imports capabilities this weft does not allow uploaded plugins: {}; allow them in the config's plugin_registry.allow_capabilities (source_query, outbound_http) or rebuild the component without them",
        imports.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
    )]
    Capabilities {
        /// The offending imports.
        imports: Vec<String>,
    },
    /// The component is larger than `plugin_registry.max_component_mb`.
    #[error(
        "the component is {bytes} bytes, more than plugin_registry.max_component_mb allows ({limit} bytes); shrink it (e.g. `wasm-tools strip`) or raise the limit"
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The version exists with other bytes or another kind.
    #[error(
        "plugin {name}@{version} is already registered with other content (sha256 {existing_sha256}, kind {existing_kind}); versions are immutable, so upload this one under a new version"
    )]
    Conflict {
        /// The plugin's name.
        name: String,
        /// The version.
        version: String,
        /// The registered bytes' digest.
        existing_sha256: String,
        /// The registered kind.
        existing_kind: String,
    },
    /// No such version.
    #[error("plugin {0} is not registered")]
    NotFound(PluginRef),
    /// Functions of the running config use the version.
    #[error(
        "plugin {plugin} is in use by function{} {}; point {} at another version (config apply) before deleting it",
        if functions.len() == 1 { "" } else { "s" },
        functions.join(", "),
        if functions.len() == 1 { "it" } else { "them" }
    )]
    InUse {
        /// The version.
        plugin: PluginRef,
        /// The functions that name it.
        functions: Vec<String>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The registry directory could not be written.
    #[error("cannot write the component to {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// An upload: the version and kind it declares, and the component bytes.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The account uploading it; empty for the operator.
    pub account: String,
    /// The plugin's name.
    pub name: String,
    /// The version.
    pub version: String,
    /// The function kind it implements.
    pub kind: String,
    /// The component.
    pub bytes: Vec<u8>,
}

/// The registry. Cheap to clone.
#[derive(Clone)]
pub struct PluginRegistry {
    dir: PathBuf,
    store: Store,
    engine: PluginEngine,
}

impl PluginRegistry {
    /// The registry of `store`, keeping components in `dir` (created if
    /// missing) and checking them with `engine`.
    pub fn open(dir: &Path, store: Store, engine: PluginEngine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(PluginRegistry {
            dir: dir.to_path_buf(),
            store,
            engine,
        })
    }

    /// The file holding `plugin`'s component.
    pub fn file(&self, plugin: &RegisteredPlugin) -> PathBuf {
        self.dir.join(format!("{}.wasm", plugin.sha256))
    }

    /// Checks, stores and precompiles `upload` under `policy`. Blocks while
    /// the component compiles (seconds for a large one).
    pub fn register(
        &self,
        upload: Upload,
        policy: &PluginRegistryConfig,
    ) -> Result<Registration, RegistryError> {
        if let Some(message) = PluginRef::name_problem(&upload.name) {
            return Err(RegistryError::Invalid {
                field: "name",
                message,
            });
        }
        if let Some(message) = PluginRef::version_problem(&upload.version) {
            return Err(RegistryError::Invalid {
                field: "version",
                message,
            });
        }
        if !weft_config::FunctionKind::ALL
            .iter()
            .any(|kind| kind.as_str() == upload.kind)
        {
            return Err(RegistryError::Invalid {
                field: "kind",
                message: format!(
                    "unknown function kind {:?}: use transform, filter, routing or enrichment",
                    upload.kind
                ),
            });
        }
        if upload.bytes.len() > policy.max_component_bytes() {
            return Err(RegistryError::TooLarge {
                bytes: upload.bytes.len(),
                limit: policy.max_component_bytes(),
            });
        }
        let sha256 = hex::encode(Sha256::digest(&upload.bytes));
        if let Some(existing) =
            self.store
                .registered_plugin(&upload.account, &upload.name, &upload.version)?
        {
            if existing.sha256 != sha256 || existing.kind != upload.kind {
                return Err(conflict(existing));
            }
            return Ok(Registration::Unchanged(existing));
        }

        let label = PathBuf::from(format!("{}@{}", upload.name, upload.version));
        let imports = self
            .engine
            .inspect(
                &upload.name,
                &label,
                &upload.kind,
                &upload.bytes,
                &policy.allowed_imports(),
            )
            .map_err(|error| match error {
                PluginError::Ungranted { imports, .. } => RegistryError::Capabilities { imports },
                other => RegistryError::Rejected(other),
            })?;
        let plugin = RegisteredPlugin {
            account: upload.account,
            name: upload.name,
            version: upload.version,
            kind: upload.kind,
            sha256,
            bytes: upload.bytes.len() as u64,
            imports,
            registered_at: 0,
        };
        let path = self.file(&plugin);
        if !path.is_file() {
            weft_core::fs::write_atomically(&path, &upload.bytes)
                .map_err(|source| RegistryError::Io { path, source })?;
        }
        match self.store.register_plugin(&plugin)? {
            Registration::Conflict(existing) => Err(conflict(existing)),
            done => Ok(done),
        }
    }

    /// Every version `account` registered (`None`: every account's).
    pub fn list(&self, account: Option<&str>) -> Result<Vec<RegisteredPlugin>, RegistryError> {
        Ok(self.store.registered_plugins(account)?)
    }

    /// `account`'s registered version `plugin`.
    pub fn get(
        &self,
        account: &str,
        plugin: &PluginRef,
    ) -> Result<RegisteredPlugin, RegistryError> {
        self.store
            .registered_plugin(account, &plugin.name, &plugin.version)?
            .ok_or_else(|| RegistryError::NotFound(plugin.clone()))
    }

    /// Deletes `account`'s `plugin` unless a function of that account in
    /// `running` names it; removes its file unless another version has the
    /// same bytes.
    pub fn delete<D>(
        &self,
        account: &str,
        plugin: &PluginRef,
        running: Option<&Config<D>>,
    ) -> Result<RegisteredPlugin, RegistryError> {
        let registered = self.get(account, plugin)?;
        let users: Vec<String> = running
            .map(|config| {
                config
                    .functions
                    .iter()
                    .filter(|f| {
                        f.plugin.as_ref() == Some(plugin)
                            && f.account.as_deref().unwrap_or_default() == account
                    })
                    .map(|f| f.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        if !users.is_empty() {
            return Err(RegistryError::InUse {
                plugin: plugin.clone(),
                functions: users,
            });
        }
        let shared = self
            .store
            .unregister_plugin(account, &plugin.name, &plugin.version)?;
        if !shared {
            let path = self.file(&registered);
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "cannot remove a deleted plugin's component file");
            }
        }
        Ok(registered)
    }

    /// Points every function of `config` that names a registered plugin at
    /// the component file of that plugin in the function's account. Answers, per function that cannot be
    /// resolved, its index in `functions` and why.
    pub fn resolve<D>(&self, config: &mut Config<D>) -> Result<(), Vec<(usize, String)>> {
        let mut problems = Vec::new();
        for (i, function) in config.functions.iter_mut().enumerate() {
            let Some(reference) = &function.plugin else {
                continue;
            };
            let account = function.account.as_deref().unwrap_or_default();
            match self
                .store
                .registered_plugin(account, &reference.name, &reference.version)
            {
                Ok(Some(plugin)) if plugin.kind != function.kind.as_str() => problems.push((
                    i,
                    format!(
                        "plugin {reference} is registered as a {} function, but `{}` is a {}",
                        plugin.kind,
                        function.name,
                        function.kind.as_str()
                    ),
                )),
                Ok(Some(plugin)) => function.file = self.file(&plugin),
                Ok(None) => problems.push((
                    i,
                    format!(
                        "plugin {reference} is not registered; upload it first (`weft plugin push` or POST /api/plugins)"
                    ),
                )),
                Err(error) => problems.push((i, format!("cannot read the registry: {error}"))),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

fn conflict(existing: RegisteredPlugin) -> RegistryError {
    RegistryError::Conflict {
        name: existing.name,
        version: existing.version,
        existing_sha256: existing.sha256,
        existing_kind: existing.kind,
    }
}
