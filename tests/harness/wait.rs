//! Waiting for something to become true, the one way the tests do it.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Calls `probe` every `interval` until it gives `Ok`, and returns that.
/// After `timeout` it fails the test with `what`, the last probe's `Err`
/// and `context()` (a log, a state dump: whatever explains the wait).
pub fn until<T, E: Debug>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
    context: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(found) => return found,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: still {last:?} after {timeout:?}\n{}", context())
            }
            Err(_) => std::thread::sleep(interval),
        }
    }
}

#[test]
fn returns_the_first_ok_and_fails_with_the_last_err() {
    let mut calls = 0;
    let got = until(
        "three calls",
        Duration::from_secs(5),
        Duration::ZERO,
        || {
            calls += 1;
            if calls == 3 { Ok(calls) } else { Err(calls) }
        },
        String::new,
    );
    assert_eq!(got, 3);
    let failed = std::panic::catch_unwind(|| {
        until(
            "never",
            Duration::from_millis(20),
            Duration::from_millis(5),
            || Err::<(), _>("not yet"),
            || "the context".into(),
        )
    })
    .unwrap_err();
    let message = failed.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("never: still \"not yet\" after 20ms\nthe context"),
        "{message}"
    );
}
