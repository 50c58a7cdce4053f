//! An account's CPU share: how much of one core its functions' guests may
//! use over time, together, whatever their sinks and instances.
//!
//! A call's timeout bounds one call, not the rate of calls: a tenant whose
//! guests spin to their timeout on every change keeps a core busy for as
//! long as it has changes, which a neighbour on a two-core host feels.
//! With `accounts[].limits.plugin_cpu_percent`, each guest call adds the
//! CPU time its thread used ([`thread_cpu_time`]; time the guest waits on
//! a host call, an HTTP answer or a source query, is not CPU) to the
//! account's debt, the debt is paid off at the share's rate,
//! and the account's next call waits (on its own blocking thread, so only
//! its own sinks slow down) while the debt is above a small burst.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Guest time an account may run ahead of its share before it waits, so
/// that short calls are never delayed.
const BURST: Duration = Duration::from_millis(100);

/// One account's share of a core, shared by all its function instances.
/// Cheap to clone; clones share the debt.
#[derive(Clone)]
pub struct CpuShare {
    account: Arc<str>,
    state: Arc<Mutex<Debt>>,
}

struct Debt {
    /// Fraction of one core (0.01 to 64).
    cores: f64,
    /// Guest time used beyond the share, as of `at`.
    owed: Duration,
    at: Instant,
}

impl Debt {
    /// Pays off what the time since `at` earned at the share's rate.
    fn settle(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.at).mul_f64(self.cores);
        self.owed = self.owed.saturating_sub(earned);
        self.at = now;
    }
}

impl std::fmt::Debug for CpuShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuShare")
            .field("account", &self.account)
            .field("cores", &self.cores())
            .finish()
    }
}

/// Two handles are equal when they share one debt (the same account).
impl PartialEq for CpuShare {
    fn eq(&self, other: &CpuShare) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Eq for CpuShare {}

impl CpuShare {
    /// The share of `account`, set to `percent` of one core: every call
    /// for the same account answers a handle on the same debt, so that
    /// functions loaded later (a hot swap, a new sink) share it too.
    ///
    /// Shares no function holds any more (an account deleted, or its limit
    /// lifted) are forgotten here, so that the registry stays as small as
    /// the accounts in use.
    pub fn of_account(account: &str, percent: u32) -> CpuShare {
        let cores = f64::from(percent) / 100.0;
        let mut shares = registered_shares();
        shares.retain(|_, share| Arc::strong_count(&share.state) > 1);
        let share = shares
            .entry(account.to_string())
            .or_insert_with(|| CpuShare::new(account, cores));
        share.lock().cores = cores;
        share.clone()
    }

    /// A share of `cores` of one core for `account`, owing nothing.
    pub fn new(account: &str, cores: f64) -> CpuShare {
        CpuShare {
            account: Arc::from(account),
            state: Arc::new(Mutex::new(Debt {
                cores,
                owed: Duration::ZERO,
                at: Instant::now(),
            })),
        }
    }

    /// The share, in cores.
    pub fn cores(&self) -> f64 {
        self.lock().cores
    }

    /// The CPU time used beyond the share, as of now.
    pub fn owed(&self) -> Duration {
        let mut debt = self.lock();
        debt.settle(Instant::now());
        debt.owed
    }

    /// Blocks until the account's debt is within the burst; answers how
    /// long it waited (also counted in [`weft_core::metrics::ACCOUNT_CPU_WAIT`]).
    /// Call it from a blocking thread, before a guest call.
    pub fn wait_turn(&self) -> Duration {
        let started = Instant::now();
        let mut waited = false;
        loop {
            let wait = {
                let mut debt = self.lock();
                debt.settle(Instant::now());
                if debt.owed <= BURST {
                    let took = started.elapsed();
                    if waited {
                        metrics::counter!(weft_core::metrics::ACCOUNT_CPU_WAIT, "account" => self.account.to_string())
                            .increment(took.as_millis() as u64);
                    }
                    return if waited { took } else { Duration::ZERO };
                }
                (debt.owed - BURST).div_f64(debt.cores)
            };
            waited = true;
            std::thread::sleep(wait);
        }
    }

    /// Records `used` of CPU time of a guest call.
    pub fn spent(&self, used: Duration) {
        let mut debt = self.lock();
        debt.settle(Instant::now());
        debt.owed += used;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Debt> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Every account's share, by account name.
fn registered_shares() -> std::sync::MutexGuard<'static, HashMap<String, CpuShare>> {
    static SHARES: OnceLock<Mutex<HashMap<String, CpuShare>>> = OnceLock::new();
    SHARES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The CPU time the calling thread has used. Guest calls run on the
/// calling thread, and so do host calls, which block it while they wait
/// (see [`crate::outbound_http`]), so the difference across a call
/// is the CPU the call used.
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec, and the thread CPU
    // clock exists on every Linux weft supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is readable");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_counts_work_not_waits() {
        let before = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(200));
        let slept = thread_cpu_time() - before;
        assert!(slept < Duration::from_millis(50), "{slept:?}");
        // Spinning adds CPU time however busy the machine is (only the
        // wall time it takes varies).
        let before = thread_cpu_time();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut spin = 0u64;
        while thread_cpu_time() - before < Duration::from_millis(50) {
            assert!(
                Instant::now() < deadline,
                "30 s of spinning used no CPU time"
            );
            for _ in 0..10_000 {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
        }
    }

    #[test]
    fn calls_beyond_the_share_wait_until_the_debt_is_paid() {
        let share = CpuShare::new("a", 0.5);
        assert_eq!(share.wait_turn(), Duration::ZERO, "nothing owed yet");
        // 300 ms of guest time at half a core is paid off after 600 ms; the
        // next call may start once 100 ms (the burst) is left: after 400 ms.
        share.spent(Duration::from_millis(300));
        let waited = share.wait_turn();
        assert!(waited >= Duration::from_millis(390), "{waited:?}");
        assert!(share.lock().owed <= BURST);
    }

    #[test]
    fn short_calls_within_the_burst_never_wait() {
        let share = CpuShare::new("a", 0.1);
        share.spent(Duration::from_millis(50));
        assert_eq!(share.wait_turn(), Duration::ZERO);
    }

    #[test]
    fn an_accounts_functions_share_one_debt_and_take_a_new_percent() {
        let first = CpuShare::of_account("cpu-share-test", 50);
        let second = CpuShare::of_account("cpu-share-test", 25);
        assert_eq!(first, second);
        assert_eq!(first.cores(), 0.25);
        assert_ne!(first, CpuShare::of_account("cpu-share-other", 25));
    }

    #[test]
    fn a_share_no_function_holds_is_forgotten() {
        let held = CpuShare::of_account("cpu-share-held", 10);
        drop(CpuShare::of_account("cpu-share-dropped", 10));
        CpuShare::of_account("cpu-share-next", 10);
        let shares = registered_shares();
        assert!(!shares.contains_key("cpu-share-dropped"));
        assert!(shares.contains_key("cpu-share-held"));
        drop(shares);
        drop(held);
    }
}
