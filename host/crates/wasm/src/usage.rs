//! Per-function usage metrics: calls, changes, call time, failures by
//! reason, memory high-water mark and live instances (the `weft_plugin_*`
//! metrics of [`weft_core::metrics`]), labelled by sink, function and kind.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use super::PluginError;
use weft_core::metrics::{
    PLUGIN_CALL_DURATION, PLUGIN_CALLS, PLUGIN_INSTANCES, PLUGIN_MEMORY_HIGH_WATER,
    PLUGIN_MESSAGES, PLUGIN_TRAPS,
};

/// The failure reasons [`PLUGIN_TRAPS`] counts (see
/// [`PluginError::reason_label`]).
const TRAP_REASONS: [&str; 4] = ["timeout", "oom", "trap", "bad_output"];

/// The metric handles of one function's instances.
pub(crate) struct PluginUsage {
    labels: [(&'static str, String); 3],
    calls: Counter,
    messages: Counter,
    duration: Histogram,
    memory_high_water: Gauge,
    instances: Gauge,
    high_water: usize,
}

impl PluginUsage {
    /// Handles for `function` of `kind` serving `sink`; every trap reason
    /// starts at zero so that dashboards see the series before a failure.
    pub(crate) fn new(sink: &str, function: &str, kind: &'static str) -> PluginUsage {
        let labels = [
            ("sink", sink.to_string()),
            ("function", function.to_string()),
            ("kind", kind.to_string()),
        ];
        for reason in TRAP_REASONS {
            metrics::counter!(PLUGIN_TRAPS, &with_reason(&labels, reason)).increment(0);
        }
        let calls = metrics::counter!(PLUGIN_CALLS, &labels);
        calls.increment(0);
        let messages = metrics::counter!(PLUGIN_MESSAGES, &labels);
        messages.increment(0);
        PluginUsage {
            calls,
            messages,
            duration: metrics::histogram!(PLUGIN_CALL_DURATION, &labels),
            memory_high_water: metrics::gauge!(PLUGIN_MEMORY_HIGH_WATER, &labels),
            instances: metrics::gauge!(PLUGIN_INSTANCES, &labels),
            labels,
            high_water: 0,
        }
    }

    /// Counts one call over `changes` changes that took `took`, after
    /// which the instance held `memory_bytes` of linear memory.
    pub(crate) fn called(&mut self, changes: usize, took: Duration, memory_bytes: usize) {
        self.calls.increment(1);
        self.messages.increment(changes as u64);
        self.duration.record(took.as_secs_f64());
        if memory_bytes > self.high_water {
            self.high_water = memory_bytes;
            self.memory_high_water.set(memory_bytes as f64);
        }
    }

    /// Counts a call that failed with `error`, if it failed in the guest.
    pub(crate) fn failed(&self, error: &PluginError) {
        let reason = error.reason_label();
        if TRAP_REASONS.contains(&reason) {
            metrics::counter!(PLUGIN_TRAPS, &with_reason(&self.labels, reason)).increment(1);
        }
    }

    /// Counts a new live instance until the returned guard is dropped.
    pub(crate) fn instance(&self) -> LiveInstance {
        self.instances.increment(1.0);
        LiveInstance(self.instances.clone())
    }
}

/// Held by a live instance: the instance gauge counts it until dropped.
pub(crate) struct LiveInstance(Gauge);

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

fn with_reason(labels: &[(&'static str, String); 3], reason: &str) -> Vec<(&'static str, String)> {
    let mut labels = labels.to_vec();
    labels.push(("reason", reason.to_string()));
    labels
}
