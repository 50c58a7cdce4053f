//! What happens when one database's or webhook source's feed, or one push
//! sink's delivery worker, fails while weft runs: it stops, restarts after a backoff, and
//! every other feed, every other delivery and the API keep running.
//!
//! One tenant's database must not stop another's: a setup problem found
//! on a reconnect (the REPLICATION privilege revoked, the publication
//! dropped, `wal_level` lowered) or a pipeline's store failure used to
//! end the whole process. Now the feed's `feed` health check (on its
//! database) says what failed and when it restarts, the
//! [`weft_core::metrics::FEED_RESTARTS`] counter counts the restarts, and the
//! restarted feed resumes from its sinks' cursors and the slot, as after a
//! process restart, so nothing is lost. A webhook source's feed reports in
//! the source's `feed` check (and
//! [`weft_core::metrics::WEBHOOK_FEED_RESTARTS`]) and resumes from its log; a
//! delivery worker reports the same way in its sink's `worker` check.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::ServerError;
use weft_core::health::{EntityKind, Status};

/// The health check, on the feed's database or webhook source, that
/// reports its failures.
pub const FEED_CHECK: &str = "feed";
/// The health check, on a push sink, that reports its worker's failures.
pub const WORKER_CHECK: &str = "worker";

/// The wait before the first restart of a failed feed.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a restarted feed must run before its failures are forgotten
/// (its health check clears and the next failure waits [`FIRST_BACKOFF`]).
pub const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// How often a feed has failed in a row, and how long it waits before the
/// next restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restarts {
    /// Failures since the feed last ran for [`HEALTHY_AFTER`].
    pub failures: u32,
    /// The wait before the next restart.
    pub backoff: Duration,
}

impl Default for Restarts {
    fn default() -> Restarts {
        Restarts {
            failures: 0,
            backoff: FIRST_BACKOFF,
        }
    }
}

impl Restarts {
    /// The state after one more failure: the wait doubles, up to
    /// [`MAX_BACKOFF`].
    pub fn after_failure(self) -> Restarts {
        Restarts {
            failures: self.failures + 1,
            backoff: if self.failures == 0 {
                self.backoff
            } else {
                (self.backoff * 2).min(MAX_BACKOFF)
            },
        }
    }
}

/// What restarts alone: a database's or webhook source's feed, or a push
/// sink's delivery worker, as its health check and logs name it.
#[derive(Debug, Clone)]
pub struct Supervised {
    kind: EntityKind,
    name: String,
    check: &'static str,
    /// How messages name it: "the feed", "the delivery worker".
    what: &'static str,
}

impl Supervised {
    /// The feed of the database `database`.
    pub fn feed(database: &str) -> Supervised {
        Supervised {
            kind: EntityKind::Database,
            name: database.to_string(),
            check: FEED_CHECK,
            what: "the feed",
        }
    }

    /// The feed of the webhook source `source` (its log's reader and
    /// pipeline).
    pub fn webhook_source(source: &str) -> Supervised {
        Supervised {
            kind: EntityKind::WebhookSource,
            name: source.to_string(),
            check: FEED_CHECK,
            what: "the feed",
        }
    }

    /// The delivery worker of the push sink `sink`.
    pub fn worker(sink: &str) -> Supervised {
        Supervised {
            kind: EntityKind::Sink,
            name: sink.to_string(),
            check: WORKER_CHECK,
            what: "the delivery worker",
        }
    }

    /// Reports that it stopped with `failure`, `restarts` into a row
    /// (already counting this one): an error naming when it restarts.
    pub fn failed(&self, failure: &str, restarts: Restarts) {
        error!(kind = ?self.kind, name = %self.name, %failure, restart_in = ?restarts.backoff,
            "{} failed; it restarts alone, everything else keeps running", self.what);
        weft_core::health::global().fail(
            self.kind,
            &self.name,
            self.check,
            Status::Error,
            format!(
                "{} stopped ({} failure(s) in a row): {failure}; it restarts in {}s",
                self.what,
                restarts.failures,
                restarts.backoff.as_secs()
            ),
        );
    }

    /// Reports that it restarted after `failure`: a warning until it has
    /// run [`HEALTHY_AFTER`].
    pub fn restarted(&self, failure: &str, restarts: Restarts) {
        weft_core::health::global().fail(
            self.kind,
            &self.name,
            self.check,
            Status::Warning,
            format!("{} restarted after a failure: {failure}", self.what),
        );
        info!(kind = ?self.kind, name = %self.name, failures = restarts.failures, "{} restarted", self.what);
    }

    /// Awaits `run`, `restarts` into a row of failures. A run that lasts
    /// [`HEALTHY_AFTER`] after failures clears the check and starts the
    /// count again. Answers what `run` ended with and the restarts to
    /// carry on from.
    pub async fn outlast<T>(
        &self,
        run: impl Future<Output = T>,
        restarts: Restarts,
    ) -> (T, Restarts) {
        tokio::pin!(run);
        if restarts.failures > 0 {
            tokio::select! {
                ended = &mut run => return (ended, restarts),
                _ = tokio::time::sleep(HEALTHY_AFTER) => {
                    weft_core::health::global().clear(self.kind, &self.name, self.check);
                }
            }
        }
        (run.await, Restarts::default())
    }
}

/// Waits for a feed's source and pipeline tasks to end. When either ends,
/// `halt` stops the other: a pipeline that failed would otherwise leave an
/// idle source running, and a source that failed leaves nothing to
/// process. Answers the first failure, if any (a task that ends `Ok` was
/// stopped).
pub async fn first_failure(
    mut source: JoinHandle<Result<(), ServerError>>,
    mut pipeline: JoinHandle<Result<(), ServerError>>,
    halt: &CancellationToken,
) -> Option<String> {
    let failure = |joined: Result<Result<(), ServerError>, tokio::task::JoinError>| match joined {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(join_error) => Some(format!("the task failed: {join_error}")),
    };
    let (first, source_ended) = tokio::select! {
        joined = &mut source => (failure(joined), true),
        joined = &mut pipeline => (failure(joined), false),
    };
    halt.cancel();
    let other = if source_ended { pipeline } else { source };
    let second = failure(other.await);
    first.or(second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_one_second_to_a_minute() {
        let mut restarts = Restarts::default();
        let mut waits = Vec::new();
        for _ in 0..9 {
            restarts = restarts.after_failure();
            waits.push(restarts.backoff.as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(restarts.failures, 9);
    }

    fn failed(detail: &str) -> Result<(), ServerError> {
        Err(ServerError::Sink {
            sink: "s".into(),
            source: weft_sinks::sink::BuildError::new(detail),
        })
    }

    #[tokio::test]
    async fn a_failed_task_halts_the_other_and_its_error_is_answered() {
        let halt = CancellationToken::new();
        let waits_for_halt = {
            let halt = halt.clone();
            tokio::spawn(async move {
                halt.cancelled().await;
                Ok(())
            })
        };
        let fails = tokio::spawn(async { failed("pipeline broke") });
        let failure = first_failure(waits_for_halt, fails, &halt).await;
        assert!(halt.is_cancelled());
        assert_eq!(failure.as_deref(), Some("sink s: pipeline broke"));
    }

    #[tokio::test]
    async fn the_first_failure_wins_and_stopped_tasks_are_no_failure() {
        let halt = CancellationToken::new();
        let first = tokio::spawn(async { failed("first") });
        let second = {
            let halt = halt.clone();
            tokio::spawn(async move {
                halt.cancelled().await;
                failed("pipeline closed")
            })
        };
        assert_eq!(
            first_failure(first, second, &halt).await.as_deref(),
            Some("sink s: first")
        );

        let halt = CancellationToken::new();
        let stopped = tokio::spawn(async { Ok(()) });
        let also = tokio::spawn(async { Ok(()) });
        assert_eq!(first_failure(stopped, also, &halt).await, None);
    }
}
