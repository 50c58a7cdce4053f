//! Running a feed, a database's or a webhook source's: its source and the
//! pipeline of its sinks as two tasks, and a supervisor that restarts the
//! feed alone when either fails ([`super::supervision`]).
//!
//! A restarted feed is built again from the running config, so a config
//! applied meanwhile is what it resumes with, and it resumes where its
//! sinks' cursors say (a database's slot, a webhook source's log).

use std::sync::atomic::Ordering;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use super::ServerError;
use super::database_feed::BuiltFeed;
use super::live_sinks::{Feed, FeedUnit, LiveSinks, NEXT_RUN, lock};
use super::supervision::{self, Restarts, Supervised};
use weft_pipeline::webhook_source::WebhookFeed;
use weft_pipeline::{SinkPipeline, SinkSetHandle};
use weft_sinks::config::DatabaseConfig;

/// What a feed restarts from.
#[derive(Clone)]
enum Origin {
    /// A database's feed; the running config gives its sinks.
    Database(DatabaseConfig),
    /// A webhook source's feed (its log's reader); the running config
    /// gives its sinks.
    Webhook(WebhookFeed),
}

impl Origin {
    fn feed(&self) -> Feed {
        match self {
            Origin::Database(database) => Feed::Database(database.name.clone()),
            Origin::Webhook(feed) => Feed::Webhook(feed.source().to_string()),
        }
    }

    fn supervised(&self) -> Supervised {
        match self {
            Origin::Database(database) => Supervised::feed(&database.name),
            Origin::Webhook(feed) => Supervised::webhook_source(feed.source()),
        }
    }

    fn count_restart(&self) {
        match self {
            Origin::Database(database) => {
                metrics::counter!(weft_core::metrics::FEED_RESTARTS, "database" => database.name.clone())
                    .increment(1)
            }
            Origin::Webhook(feed) => metrics::counter!(
                weft_core::metrics::WEBHOOK_FEED_RESTARTS, "source" => feed.source().to_string()
            )
            .increment(1),
        }
    }
}

/// One run's two tasks, and the tokens that end them: `stop` for good,
/// `halt` (a child of `stop`) this run only.
struct Run {
    source: JoinHandle<Result<(), ServerError>>,
    pipeline: JoinHandle<Result<(), ServerError>>,
    stop: CancellationToken,
    halt: CancellationToken,
}

impl LiveSinks {
    /// Runs `built`: its database's source and the pipeline of its sinks,
    /// until shutdown or [`LiveSinks::stop_database`]. When either fails,
    /// this feed alone restarts after a backoff ([`super::supervision`]).
    pub fn spawn_database(&self, built: BuiltFeed) {
        self.run_database(built, Restarts::default());
    }

    /// Runs a webhook source's `feed` and the pipeline of its sinks
    /// (`pipelines`) until shutdown; when either fails, they alone restart
    /// after a backoff. See [`weft_pipeline::webhook_source`].
    pub fn spawn_webhook_source(&self, feed: WebhookFeed, pipelines: Vec<SinkPipeline>) {
        self.run_webhook_source(feed, pipelines, Restarts::default());
    }

    /// Runs `built` as [`Self::spawn_database`] does, `restarts` into a
    /// row of failures.
    fn run_database(&self, built: BuiltFeed, restarts: Restarts) {
        let BuiltFeed {
            database,
            sinks,
            source,
        } = built;
        let pipelines = sinks
            .into_iter()
            .map(|(sink, chain)| {
                self.register_chain(&sink, &chain);
                SinkPipeline::new(sink, chain)
            })
            .collect();
        let (pipeline, events_tx, events_rx, durable_rx) =
            super::wire_pipeline(pipelines, &self.store, &self.handles);
        let (handle, changes) = SinkSetHandle::channel();
        let pipeline = pipeline
            .with_backfills(self.backfills.clone())
            .with_sink_changes(changes);
        let stop = self.shutdown.child_token();
        let halt = stop.child_token();
        let (name, until) = (database.name.clone(), halt.clone());
        let source_task = tokio::spawn(
            async move {
                weft_source::run(source, events_tx, durable_rx, until)
                    .await
                    .map_err(|source| ServerError::Source {
                        database: name,
                        source,
                    })
            }
            .instrument(
                info_span!("source", database = %database.name, slot = %database.slot.name),
            ),
        );
        let (name, until) = (database.name.clone(), halt.clone());
        let pipeline_task = super::pipeline_threads::spawn(
            async move {
                pipeline
                    .run(events_rx, until)
                    .await
                    .map_err(|source| ServerError::Pipeline {
                        database: name,
                        source,
                    })
            }
            .instrument(
                info_span!("pipeline", database = %database.name, slot = %database.slot.name),
            ),
        );
        let run = Run {
            source: source_task,
            pipeline: pipeline_task,
            stop,
            halt,
        };
        let slot = Some(database.slot.name.clone());
        self.supervise(Origin::Database(database), run, handle, slot, restarts);
    }

    /// Runs a webhook source's feed as [`Self::spawn_webhook_source`]
    /// does, `restarts` into a row of failures.
    fn run_webhook_source(
        &self,
        feed: WebhookFeed,
        pipelines: Vec<SinkPipeline>,
        restarts: Restarts,
    ) {
        let source = feed.source().to_string();
        let (pipeline, events_tx, events_rx, durable_rx) =
            super::wire_pipeline(pipelines, &self.store, &self.handles);
        let (handle, changes) = SinkSetHandle::channel();
        let pipeline = pipeline.with_sink_changes(changes);
        let name = source.clone();
        let failed = move |detail: String| ServerError::WebhookSource {
            source_name: name.clone(),
            detail,
        };
        let stop = self.shutdown.child_token();
        let halt = stop.child_token();
        let (reader, until, fail) = (feed.clone(), halt.clone(), failed.clone());
        let source_task = tokio::spawn(
            async move {
                reader
                    .run(events_tx, durable_rx, until)
                    .await
                    .map_err(|e| fail(e.to_string()))
            }
            .instrument(info_span!("webhook_feed", source = %source)),
        );
        let until = halt.clone();
        let pipeline_task = super::pipeline_threads::spawn(
            async move {
                pipeline
                    .run(events_rx, until)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
            .instrument(info_span!("pipeline", webhook_source = %source)),
        );
        let run = Run {
            source: source_task,
            pipeline: pipeline_task,
            stop,
            halt,
        };
        self.supervise(Origin::Webhook(feed), run, handle, None, restarts);
    }

    /// Records `run` as the running feed of `origin` (its sinks changing
    /// through `sinks`, its replication slot `slot`) and supervises it:
    /// when either task fails, both stop and the feed restarts.
    fn supervise(
        &self,
        origin: Origin,
        run: Run,
        sinks: SinkSetHandle,
        slot: Option<String>,
        restarts: Restarts,
    ) {
        let Run {
            source,
            pipeline,
            stop,
            halt,
        } = run;
        let number = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let feed = origin.feed();
        let span = match &feed {
            Feed::Database(name) => info_span!("feed", database = %name),
            Feed::Webhook(name) => info_span!("feed", webhook_source = %name),
        };
        let supervisor = tokio::spawn({
            let (live, stop) = (self.clone(), stop.clone());
            async move {
                let ended = supervision::first_failure(source, pipeline, &halt);
                let (failure, restarts) = origin.supervised().outlast(ended, restarts).await;
                if let Some(failure) = failure {
                    live.after_feed_failed(origin, number, failure, restarts, stop)
                        .await;
                }
            }
            .instrument(span)
        });
        lock(&self.feeds).insert(
            feed,
            FeedUnit {
                sinks,
                slot,
                stop,
                supervisor,
                run: number,
            },
        );
    }

    /// After the run `run` of `origin`'s feed failed with `failure`:
    /// reports it and, after the backoff of `restarts`, starts the feed
    /// again as the running config defines it, unless `stop` ends it
    /// meanwhile or another run replaced it.
    async fn after_feed_failed(
        &self,
        origin: Origin,
        run: u64,
        mut failure: String,
        mut restarts: Restarts,
        stop: CancellationToken,
    ) {
        let supervised = origin.supervised();
        while !stop.is_cancelled() {
            restarts = restarts.after_failure();
            origin.count_restart();
            supervised.failed(&failure, restarts);
            let Some(_turn) = self.restart_turn(&stop, restarts).await else {
                return;
            };
            if lock(&self.feeds)
                .get(&origin.feed())
                .is_none_or(|unit| unit.run != run)
            {
                return;
            }
            match self.restart(&origin, &stop, &failure, restarts).await {
                Ok(()) => return,
                Err(again) => failure = again,
            }
        }
    }

    /// Builds `origin`'s feed from the running config and starts it,
    /// reporting that it restarted after `failure`. Does nothing when the
    /// config no longer has it or `stop` ended it; answers why it could
    /// not be built.
    async fn restart(
        &self,
        origin: &Origin,
        stop: &CancellationToken,
        failure: &str,
        restarts: Restarts,
    ) -> Result<(), String> {
        let config = self.functions.running();
        let loaded = match origin {
            Origin::Database(database) => {
                let Some(current) = config.database(&database.name).cloned() else {
                    return Ok(());
                };
                let (engine, data_dir) = (self.functions.engine().clone(), self.data_dir.clone());
                tokio::task::spawn_blocking(move || {
                    BuiltFeed::build(&config, &current, &engine, &data_dir)
                        .map(|built| built.map(|built| Loaded::Database(Box::new(built))))
                })
                .await
            }
            Origin::Webhook(feed) => {
                if config.webhook_source(feed.source()).is_none() {
                    return Ok(());
                }
                let (live, feed) = (self.clone(), feed.clone());
                tokio::task::spawn_blocking(move || {
                    config
                        .sinks_of_webhook(feed.source())
                        .map(|sink| live.pipeline(&config, sink))
                        .collect::<Result<Vec<_>, _>>()
                        .map(|pipelines| Some(Loaded::Webhook(feed, pipelines)))
                })
                .await
            }
        };
        if stop.is_cancelled() {
            return Ok(()); // shut down while the functions loaded
        }
        let loaded = match loaded {
            Ok(Ok(Some(loaded))) => loaded,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(error)) => return Err(error.to_string()),
            Err(error) => return Err(format!("the function loading task failed: {error}")),
        };
        origin.supervised().restarted(failure, restarts);
        match loaded {
            Loaded::Database(built) => {
                for target in built.backfill_targets() {
                    self.launcher.set_target(target);
                }
                self.run_database(*built, restarts);
            }
            Loaded::Webhook(feed, pipelines) => {
                self.run_webhook_source(feed, pipelines, restarts);
            }
        }
        Ok(())
    }
}

/// A feed loaded again for a restart.
enum Loaded {
    Database(Box<BuiltFeed>),
    /// A webhook source's log reader and its sinks' pipelines.
    Webhook(WebhookFeed, Vec<SinkPipeline>),
}
