//! The settings of a Sequin Stream sink: `destination:` as written, with
//! Sequin's defaults ([`SequinStreamConfig`]); the pull API serves them as
//! [`SequinStreamSettings`](crate::pull::SequinStreamSettings).

use std::time::Duration;

use serde::Deserialize;

use crate::pull::SequinStreamSettings;
use weft_config::bounds;

/// How pull consumers of a Sequin Stream sink are served.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "sequin_stream settings")]
pub struct SequinStreamConfig {
    /// Visibility timeout: how long a received message stays invisible to
    /// other receives before it is redelivered unless acked, in
    /// milliseconds. Default 30000, at least 500.
    #[serde(
        default = "SequinStreamConfig::default_ack_wait_ms",
        deserialize_with = "bounds::in_range::<_, u64, 500, { u64::MAX }>"
    )]
    pub ack_wait_ms: u64,
    /// Most messages delivered and not yet acked; receives return nothing
    /// more until some are acked or time out. Default 10000, at least 1.
    #[serde(
        default = "SequinStreamConfig::default_max_ack_pending",
        deserialize_with = "bounds::in_range::<_, u32, 1, { u64::MAX }>"
    )]
    pub max_ack_pending: u32,
    /// Most receive requests waiting (long-polling) at once; more are
    /// refused. Default 20, at least 1.
    #[serde(
        default = "SequinStreamConfig::default_max_waiting",
        deserialize_with = "bounds::in_range::<_, u32, 1, { u64::MAX }>"
    )]
    pub max_waiting: u32,
    /// Most deliveries of one message; after that it is dead-lettered.
    /// Default unlimited, at least 1 when set.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u32, 1, { u64::MAX }>"
    )]
    pub max_deliver: Option<u32>,
}

impl SequinStreamConfig {
    /// Default `ack_wait_ms` (Sequin's).
    pub const DEFAULT_ACK_WAIT_MS: u64 = 30_000;
    /// Default `max_ack_pending` (Sequin's).
    pub const DEFAULT_MAX_ACK_PENDING: u32 = 10_000;
    /// Default `max_waiting` (Sequin's).
    pub const DEFAULT_MAX_WAITING: u32 = 20;

    /// The visibility timeout as a duration.
    pub fn ack_wait(&self) -> Duration {
        Duration::from_millis(self.ack_wait_ms)
    }

    fn default_ack_wait_ms() -> u64 {
        Self::DEFAULT_ACK_WAIT_MS
    }

    fn default_max_ack_pending() -> u32 {
        Self::DEFAULT_MAX_ACK_PENDING
    }

    fn default_max_waiting() -> u32 {
        Self::DEFAULT_MAX_WAITING
    }
}

impl Default for SequinStreamConfig {
    fn default() -> Self {
        SequinStreamConfig {
            ack_wait_ms: Self::DEFAULT_ACK_WAIT_MS,
            max_ack_pending: Self::DEFAULT_MAX_ACK_PENDING,
            max_waiting: Self::DEFAULT_MAX_WAITING,
            max_deliver: None,
        }
    }
}

impl SequinStreamConfig {
    /// The settings the pull API serves this sink with.
    pub fn settings(&self) -> SequinStreamSettings {
        SequinStreamSettings {
            ack_wait: self.ack_wait(),
            max_ack_pending: self.max_ack_pending,
            max_waiting: self.max_waiting,
            max_deliver: self.max_deliver,
        }
    }
}
