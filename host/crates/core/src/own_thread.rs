//! Runtimes of one worker thread, for the work that must not hop between
//! the process's workers (backfill runners, pipelines).

/// A runtime whose tasks all run on one worker thread named `name`, with
/// timers and I/O; its blocking pool's threads carry the same name.
pub fn runtime(name: String) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        // Fails only when the OS cannot start a thread.
        .expect("a runtime of one thread starts")
}
