//! How each running sink's messages leave weft: a pull stream that
//! consumers receive from the store, or a push delivery worker, which
//! delivers from the sink's memory lane and from the store, and restarts
//! alone after a backoff when it fails while every other sink keeps
//! delivering.

use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use super::ServerError;
use super::live_sinks::{LiveSinks, NEXT_RUN, Worker, lock};
use super::supervision::{Restarts, Supervised};
use weft_sinks::config::{Config, SinkConfig};
use weft_sinks::delivery::{DeliveryWaker, DeliveryWorker};
use weft_sinks::pause::PauseSwitch;
use weft_sinks::sequin_stream::{SequinStream, SequinStreamSettings};
use weft_sinks::sink::Built;

/// How a sink's messages leave the store, built but not started.
pub enum Delivery {
    /// Consumers pull them over HTTP.
    Pull {
        /// The stream's settings.
        settings: SequinStreamSettings,
        /// Whether the sink is paused.
        paused: bool,
    },
    /// A delivery worker pushes them to the destination.
    Push {
        /// The worker, not yet running.
        worker: DeliveryWorker,
        /// Wakes it when messages are stored.
        waker: DeliveryWaker,
        /// Pauses it.
        pause: PauseSwitch,
    },
}

impl LiveSinks {
    /// Builds how `sink` delivers, as `config` says; starts nothing.
    pub fn delivery(&self, config: &Config, sink: &SinkConfig) -> Result<Delivery, ServerError> {
        let paused = self.store.is_paused(&sink.name)?;
        let built = sink
            .destination
            .build(sink, config)
            .map_err(|source| ServerError::Sink {
                sink: sink.name.clone(),
                source,
            })?;
        match built {
            Built::Pull(settings) => Ok(Delivery::Pull { settings, paused }),
            Built::Push { destination, retry } => {
                let waker = DeliveryWaker::new();
                let pause = PauseSwitch::new(paused);
                let budget = sink.max_memory_mb as usize * 1024 * 1024;
                let worker = DeliveryWorker::new(
                    &sink.name,
                    self.store.clone(),
                    destination,
                    retry,
                    waker.clone(),
                )
                .with_memory_budget(budget)
                .with_pause(pause.clone())
                .with_lane(self.handles.lane_for(&sink.name, budget));
                Ok(Delivery::Push {
                    worker,
                    waker,
                    pause,
                })
            }
        }
    }

    /// Starts `delivery` for the sink `name`, in place of how it delivered
    /// before: a replaced delivery worker first finishes its deliveries in
    /// flight.
    pub async fn start_delivery(&self, name: &str, delivery: Delivery) {
        self.stop_worker(name).await;
        match delivery {
            Delivery::Pull { settings, paused } => {
                let stream = SequinStream::new(name, self.store.clone(), settings);
                stream.pause_switch().set(paused);
                self.handles.put_pull(name, stream);
            }
            Delivery::Push {
                worker,
                waker,
                pause,
            } => {
                self.handles.put_push(name, waker, pause);
                self.run_worker(name, worker, Restarts::default());
            }
        }
    }

    /// Runs `worker`, the delivery worker of the sink `name`, `restarts`
    /// into a row of failures. A failure (the store, or a delivery task
    /// that panicked) restarts this worker alone after a backoff; every
    /// other sink keeps delivering.
    fn run_worker(&self, name: &str, worker: DeliveryWorker, restarts: Restarts) {
        let stop = self.shutdown.child_token();
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let done = tokio::spawn({
            let (live, sink, until) = (self.clone(), name.to_string(), stop.clone());
            async move {
                let (ended, restarts) = Supervised::worker(&sink)
                    .outlast(worker.run(until.clone()), restarts)
                    .await;
                if let Err(error) = ended {
                    live.after_worker_failed(sink, run, error.to_string(), restarts, until)
                        .await;
                }
            }
            .instrument(info_span!("delivery", sink = %name))
        });
        lock(&self.workers).insert(name.to_string(), Worker { stop, done, run });
    }

    /// After the run `run` of the delivery worker of `sink` failed with
    /// `failure`: reports it and, after the backoff of `restarts`, starts
    /// a worker again as the running config defines the sink, unless
    /// `stop` ends it meanwhile or another worker replaced it.
    async fn after_worker_failed(
        &self,
        sink: String,
        run: u64,
        mut failure: String,
        mut restarts: Restarts,
        stop: CancellationToken,
    ) {
        let supervised = Supervised::worker(&sink);
        while !stop.is_cancelled() {
            restarts = restarts.after_failure();
            supervised.failed(&failure, restarts);
            let Some(_turn) = self.restart_turn(&stop, restarts).await else {
                return;
            };
            if lock(&self.workers).get(&sink).is_none_or(|w| w.run != run) {
                return;
            }
            let config = self.functions.running();
            let Some(sink_config) = config.sinks.iter().find(|s| s.name == sink) else {
                return;
            };
            match self.delivery(&config, sink_config) {
                Ok(Delivery::Push {
                    worker,
                    waker,
                    pause,
                }) => {
                    self.handles.put_push(&sink, waker, pause);
                    supervised.restarted(&failure, restarts);
                    self.run_worker(&sink, worker, restarts);
                    return;
                }
                // Now a pull sink: the apply that made it one started its stream.
                Ok(Delivery::Pull { .. }) => return,
                Err(error) => failure = error.to_string(),
            }
        }
    }

    /// Waits out `restarts`' backoff, then for the turn between config
    /// applies (an apply may stop or replace what restarts); `None` when
    /// `stop` ends it first.
    pub(super) async fn restart_turn(
        &self,
        stop: &CancellationToken,
        restarts: Restarts,
    ) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(restarts.backoff) => {}
        }
        let turn = tokio::select! {
            _ = stop.cancelled() => return None,
            turn = self.functions.apply_turn() => turn,
        };
        (!stop.is_cancelled()).then_some(turn)
    }

    /// Stops the delivery worker of `name`, if it has one, once its
    /// deliveries in flight finish.
    pub(super) async fn stop_worker(&self, name: &str) {
        let worker = lock(&self.workers).remove(name);
        if let Some(worker) = worker {
            worker.stop().await;
        }
    }
}
