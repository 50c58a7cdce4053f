//! The threads feeds' pipelines run on: each pipeline stays on one thread
//! of its own for its whole run, instead of hopping between the process's
//! workers.
//!
//! A pipeline renders every message it stores and frees it once stored.
//! On the process's workers the task moved between threads from one poll
//! to the next, so most payloads were freed on a thread other than the one
//! that allocated them, through mimalloc's slower cross-thread path, and
//! the pipeline competed with the API and the delivery workers for the
//! same two queues (BENCHMARKS.md, "Twenty-third round").

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// One single-worker runtime per core, shared round-robin by the feeds:
/// several databases' pipelines still use several cores, and each one
/// stays on its thread. Never dropped: pipelines stop through their
/// cancellation tokens.
fn runtimes() -> &'static [Runtime] {
    static RUNTIMES: OnceLock<Vec<Runtime>> = OnceLock::new();
    RUNTIMES.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..threads)
            .map(|i| weft_core::own_thread::runtime(format!("weft-pipeline-{i}")))
            .collect()
    })
}

/// Runs `pipeline` on the next pipeline thread.
pub(super) fn spawn<F>(pipeline: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let runtimes = runtimes();
    let next = NEXT.fetch_add(1, Ordering::Relaxed) % runtimes.len();
    runtimes[next].spawn(pipeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread() -> std::thread::ThreadId {
        std::thread::current().id()
    }

    /// A pipeline is polled on one pipeline thread from start to end, not
    /// on the launching runtime's, and the next one starts on another
    /// (when the machine has more than one core).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pipeline_stays_on_one_pipeline_thread() {
        let run = || {
            spawn(async {
                let name = std::thread::current().name().map(str::to_string);
                let mut threads = vec![thread()];
                for _ in 0..50 {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(std::time::Duration::from_micros(100)).await;
                    threads.push(thread());
                }
                (name, threads)
            })
        };
        let (first, second) = (run(), run());
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        for (name, threads) in [&first, &second] {
            assert!(
                name.as_deref()
                    .is_some_and(|n| n.starts_with("weft-pipeline-")),
                "{name:?}"
            );
            assert!(threads.iter().all(|t| *t == threads[0]), "{threads:?}");
            assert_ne!(threads[0], thread(), "not the launching runtime's thread");
        }
        if runtimes().len() > 1 {
            assert_ne!(first.1[0], second.1[0], "two pipelines share a thread");
        }
    }
}
