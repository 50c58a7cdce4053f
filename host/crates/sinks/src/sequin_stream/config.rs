//! The settings of a Sequin Stream sink: `destination:` as written, with
//! Sequin's defaults ([`SequinStreamConfig`]), and as the pull API serves
//! them ([`SequinStreamSettings`]).

use std::time::Duration;

use serde::Deserialize;
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

/// How a Sequin Stream sink hands out messages. Defaults match Sequin's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequinStreamSettings {
    /// Visibility timeout: how long a received message stays invisible to
    /// other receivers before it is handed out again (`ack_wait_ms`, default
    /// 30000, at least 500).
    pub ack_wait: Duration,
    /// No new messages are handed out while this many are in flight
    /// (received, not acked, lease not expired). Default 10000.
    pub max_ack_pending: u32,
    /// How many receive requests may be open at once for the sink; more are
    /// refused with 429. Default 20.
    pub max_waiting: u32,
    /// Most deliveries of one message: a message handed out this many times
    /// and still not acked when its lease ends (or nacked) becomes a dead
    /// letter instead of being handed out again. `None`: unlimited.
    pub max_deliver: Option<u32>,
}

impl Default for SequinStreamSettings {
    fn default() -> Self {
        SequinStreamSettings {
            ack_wait: Duration::from_millis(Self::DEFAULT_ACK_WAIT_MS),
            max_ack_pending: 10_000,
            max_waiting: 20,
            max_deliver: None,
        }
    }
}

/// A setting is out of its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `ack_wait_ms` below the minimum.
    #[error("ack_wait_ms is {0} but must be at least 500")]
    AckWaitTooShort(u128),
    /// A limit set to zero would never hand out or admit anything.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

impl SequinStreamSettings {
    /// Sequin's default visibility timeout, in milliseconds.
    pub const DEFAULT_ACK_WAIT_MS: u64 = 30_000;
    /// The shortest visibility timeout accepted, in milliseconds.
    pub const MIN_ACK_WAIT_MS: u64 = 500;

    /// Checks every setting against its allowed range.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.ack_wait < Duration::from_millis(Self::MIN_ACK_WAIT_MS) {
            return Err(SettingsError::AckWaitTooShort(self.ack_wait.as_millis()));
        }
        if self.max_ack_pending == 0 {
            return Err(SettingsError::Zero("max_ack_pending"));
        }
        if self.max_waiting == 0 {
            return Err(SettingsError::Zero("max_waiting"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_ranges_are_enforced() {
        assert_eq!(SequinStreamSettings::default().validate(), Ok(()));
        let short = SequinStreamSettings {
            ack_wait: Duration::from_millis(499),
            ..Default::default()
        };
        assert_eq!(short.validate(), Err(SettingsError::AckWaitTooShort(499)));
        let zero = SequinStreamSettings {
            max_waiting: 0,
            ..Default::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "max_waiting must be at least 1"
        );
    }
}
