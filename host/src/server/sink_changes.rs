//! Applying a [`LivePlan`] to the running sinks: everything it needs is
//! loaded and checked first ([`LiveSinks::prepare`]), so that any failure
//! refuses the config with nothing changed; then the sinks join, are
//! replaced in or leave their pipelines between two transactions, and the
//! feeds stop and start ([`LiveSinks::commit`]).

use tracing::info;

use super::database_feed::{BuiltFeed, check_reachable};
use super::live_plan::{LivePlan, SinkOp};
use super::live_sinks::{Feed, LiveSinks, lock};
use super::source_config;
use super::workers::Delivery;
use weft_core::lsn::Lsn;
use weft_pipeline::backfill::BackfillTarget;
use weft_pipeline::{FunctionChain, SinkPipeline, SinkSetChange};
use weft_sinks::config::{Config, SinkConfig};

/// A created or updated sink, ready to start.
struct ReadySink {
    config: SinkConfig,
    feed: Feed,
    created: bool,
    moved_from: Option<Feed>,
    /// Its chain and backfill target; `None` on a feed that starts, which
    /// brings its own.
    joins: Option<(FunctionChain, Option<BackfillTarget>)>,
    delivery: Delivery,
}

/// Changes loaded and checked, not yet in effect.
pub struct PreparedSinks {
    plan: LivePlan,
    /// The stopping databases the config no longer has.
    deleted_databases: Vec<String>,
    ready: Vec<ReadySink>,
    deleted: Vec<(String, Feed)>,
    feeds: Vec<BuiltFeed>,
}

/// What a commit changed.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SinkChanges {
    /// Created sinks.
    pub created: Vec<String>,
    /// Updated sinks.
    pub updated: Vec<String>,
    /// Deleted sinks.
    pub deleted: Vec<String>,
    /// Databases whose source and pipeline stopped.
    #[serde(skip)]
    pub databases_stopped: Vec<String>,
    /// Databases whose source and pipeline started.
    #[serde(skip)]
    pub databases_started: Vec<String>,
}

impl LiveSinks {
    /// Loads and checks everything `plan` needs from `proposed`: each
    /// starting database (reachable, its sinks' functions loaded), each
    /// created or updated sink's functions, destination and published
    /// tables. Nothing changes; the first problem is the error.
    pub async fn prepare(
        &self,
        proposed: &Config,
        plan: LivePlan,
    ) -> Result<PreparedSinks, String> {
        let mut prepared = PreparedSinks {
            plan: LivePlan::default(),
            deleted_databases: plan
                .stop
                .iter()
                .filter(|name| proposed.database(name).is_none())
                .cloned()
                .collect(),
            ready: Vec::new(),
            deleted: Vec::new(),
            feeds: Vec::new(),
        };
        for name in &plan.start {
            let database = proposed
                .database(name)
                .ok_or_else(|| format!("no database {name}"))?
                .clone();
            check_reachable(&database).await?;
            let (proposed, engine, data_dir) = (
                proposed.clone(),
                self.functions.engine().clone(),
                self.data_dir.clone(),
            );
            let built = tokio::task::spawn_blocking(move || {
                BuiltFeed::build(&proposed, &database, &engine, &data_dir)
            })
            .await
            .map_err(|error| format!("the function loading task failed: {error}"))?
            .map_err(|error| error.to_string())?;
            prepared.feeds.extend(built);
        }
        for op in plan.sinks.iter().cloned() {
            let (name, created, moved_from) = match op {
                SinkOp::Delete { sink, feed } => {
                    prepared.deleted.push((sink, feed));
                    continue;
                }
                SinkOp::Create { sink } => (sink, true, None),
                SinkOp::Update { sink, moved_from } => (sink, false, moved_from),
            };
            let config = proposed
                .sinks
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .ok_or_else(|| format!("sink {name} is not in the config"))?;
            let feed = Feed::of(&config).ok_or_else(|| format!("sink {name} has no source"))?;
            let joins = if plan.restarts(&feed) {
                None
            } else {
                Some(self.prepare_joining(proposed, &config, &feed).await?)
            };
            let delivery = self
                .delivery(proposed, &config)
                .map_err(|error| error.to_string())?;
            prepared.ready.push(ReadySink {
                config,
                feed,
                created,
                moved_from,
                joins,
                delivery,
            });
        }
        prepared.plan = plan;
        Ok(prepared)
    }

    /// The chain and backfill target of `sink`, joining the running
    /// `feed`: its functions loaded, its tables checked to be published.
    async fn prepare_joining(
        &self,
        proposed: &Config,
        sink: &SinkConfig,
        feed: &Feed,
    ) -> Result<(FunctionChain, Option<BackfillTarget>), String> {
        let backfill = match feed {
            Feed::Database(database) => Some(self.check_published(proposed, sink, database).await?),
            Feed::Webhook(_) => None,
        };
        let (proposed, engine, config) = (
            proposed.clone(),
            self.functions.engine().clone(),
            sink.clone(),
        );
        let name = sink.name.clone();
        let chain = tokio::task::spawn_blocking(move || {
            weft_pipeline::load_chain(&proposed, &engine, &config, |_| true)
        })
        .await
        .map_err(|error| format!("the function loading task failed: {error}"))?
        .map_err(|error| format!("sink {name}: {error}"))?;
        Ok((chain, backfill))
    }

    /// Checks that `database`'s publication covers the tables `sink`
    /// lists; answers the sink's backfill target.
    async fn check_published(
        &self,
        proposed: &Config,
        sink: &SinkConfig,
        database: &str,
    ) -> Result<BackfillTarget, String> {
        let database = proposed
            .database(database)
            .ok_or_else(|| format!("sink {}: no database {database}", sink.name))?;
        let mut source =
            source_config(database, &[sink], &self.data_dir).map_err(|e| e.to_string())?;
        source.create_publication_if_not_exists = false;
        let (client, _connection) =
            source.connection.connect_query().await.map_err(|error| {
                format!("sink {}: database {}: {error}", sink.name, database.name)
            })?;
        weft_source::slot::ensure_publication(&client, &source)
            .await
            .map_err(|error| format!("sink {}: {error}", sink.name))?;
        Ok(BackfillTarget {
            config: sink.clone(),
            connection: source.connection.clone(),
            slot: database.slot.name.clone(),
            publication: database.publication.name.clone(),
        })
    }

    /// Puts `prepared` into effect (see the module's documentation);
    /// answers what changed. An error means a pipeline stopped meanwhile:
    /// only a restart applies the rest.
    pub async fn commit(&self, prepared: PreparedSinks) -> Result<SinkChanges, String> {
        let PreparedSinks {
            plan,
            deleted_databases,
            ready,
            deleted,
            feeds,
        } = prepared;
        let mut changes = SinkChanges::default();
        for (name, feed) in deleted {
            if !plan.restarts(&feed) {
                self.change_feed(&feed, SinkSetChange::Remove(name.clone()))
                    .await?;
            }
            self.forget(&name).await?;
            changes.deleted.push(name);
        }
        for database in &plan.stop {
            self.stop_database(database, deleted_databases.contains(database))
                .await;
            changes.databases_stopped.push(database.clone());
        }
        let mut created = Vec::new();
        for ready in ready {
            let name = ready.config.name.clone();
            if let Some(old) = ready.moved_from.as_ref().filter(|old| !plan.restarts(old)) {
                self.change_feed(old, SinkSetChange::Remove(name.clone()))
                    .await?;
            }
            weft_core::health::global().forget_sink(&name, true);
            // A new sink delivers before its first messages are stored; an
            // updated one switches delivery after its new version stores.
            let mut delivery = Some(ready.delivery);
            if ready.created
                && let Some(delivery) = delivery.take()
            {
                self.start_delivery(&name, delivery).await;
            }
            let joins_running_feed = ready.joins.is_some();
            if let Some((chain, backfill)) = ready.joins {
                self.register_chain(&ready.config, &chain);
                let pipeline = SinkPipeline::new(ready.config.clone(), chain);
                let put = SinkSetChange::Put {
                    sink: Box::new(pipeline),
                    starts_here: ready.created || ready.moved_from.is_some(),
                };
                self.change_feed(&ready.feed, put).await?;
                if let Some(target) = backfill {
                    self.launcher.set_target(target);
                }
            }
            if !joins_running_feed && ready.moved_from.is_some() {
                // Its cursor is a position of the database it left; the
                // starting feed reads it, so it must not hold one.
                let (store, sink) = (self.store.clone(), name.clone());
                tokio::task::spawn_blocking(move || store.start_sink_at(&sink, Lsn::ZERO))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
            }
            if let Some(delivery) = delivery {
                self.start_delivery(&name, delivery).await;
            }
            if ready.created {
                info!(sink = %name, "sink created without a restart");
                created.push(name.clone());
                changes.created.push(name);
            } else {
                info!(sink = %name, "sink updated without a restart");
                changes.updated.push(name);
            }
        }
        for built in feeds {
            let database = built.database.name.clone();
            for target in built.backfill_targets() {
                self.launcher.set_target(target);
            }
            self.spawn_database(built);
            info!(%database, "database feed started without a restart");
            changes.databases_started.push(database);
        }
        for sink in &created {
            self.launcher.start_initial_of(sink);
        }
        Ok(changes)
    }

    /// Forgets the deleted sink `name`, out of its pipeline already: stops
    /// its delivery, cancels its backfills and deletes what the store
    /// holds for it.
    async fn forget(&self, name: &str) -> Result<(), String> {
        self.stop_worker(name).await;
        self.handles.forget(name);
        self.functions.remove_chain(name);
        weft_core::health::global().forget_sink(name, false);
        weft_core::metrics::forget_sink(name);
        self.launcher.forget_sink(name).map_err(|e| e.to_string())?;
        let (store, sink) = (self.store.clone(), name.to_string());
        let deleted = tokio::task::spawn_blocking(move || store.remove_sink(&sink))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        info!(sink = %name, messages_deleted = deleted, "sink deleted without a restart");
        Ok(())
    }

    /// Makes `change` to the sinks of `feed`'s pipeline, between two of
    /// its transactions. A feed whose pipeline failed and waits to restart
    /// ([`super::supervision`]) takes none: its restart waits for this
    /// apply to end and builds it from the running config, which has the
    /// change by then.
    async fn change_feed(&self, feed: &Feed, change: SinkSetChange) -> Result<(), String> {
        let handle = lock(&self.feeds)
            .get(feed)
            .map(|unit| unit.sinks.clone())
            .ok_or_else(|| format!("no running pipeline reads {feed:?}"))?;
        match handle.apply(change).await {
            Ok(()) => Ok(()),
            Err(_) if !self.shutdown.is_cancelled() => {
                info!(
                    ?feed,
                    "the feed is waiting to restart; it restarts with the change"
                );
                Ok(())
            }
            Err(stopped) => Err(stopped.to_string()),
        }
    }
}
