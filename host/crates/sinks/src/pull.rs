//! What a pull sink is served with: the settings the pull API hands its
//! messages out by. A pull sink's [`Sink::build`](crate::sink::Sink::build)
//! answers them (see [`crate::sink::Built::Pull`]).

use std::time::Duration;

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
