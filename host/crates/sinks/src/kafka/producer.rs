//! One librdkafka producer per sink, replaced when librdkafka declares it
//! unusable (a fatal error of the idempotent producer) or when it is wedged:
//! its messages keep timing out although the brokers answer. That happens
//! when a broker lost the producer's state (its producer id) and refuses to
//! bump its epoch: librdkafka then retries the produce requests forever.
//! A new producer gets a new producer id.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use tracing::{debug, info, warn};

use super::KafkaSettings;

/// The last connection-level error of a sink's client (refused
/// credentials, TLS, unreachable brokers), for delivery errors to quote:
/// librdkafka reports those only as timeouts of the messages.
pub type LastClientError = Arc<Mutex<Option<String>>>;

/// Routes librdkafka's logs and errors to weft's log, tagged with the sink,
/// and keeps the last connection-level error.
pub struct SinkContext {
    sink: String,
    last_error: LastClientError,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let sink = &self.sink;
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => warn!(%sink, facility, "librdkafka: {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                info!(%sink, facility, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => debug!(%sink, facility, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        use RDKafkaErrorCode as C;
        let code = error.rdkafka_error_code();
        if let Some(
            code @ (C::Authentication
            | C::SaslAuthenticationFailed
            | C::SSL
            | C::AllBrokersDown
            | C::BrokerTransportFailure),
        ) = code
        {
            // "All brokers down" follows every refused handshake: keep the
            // refusal, which says what to fix.
            let specific = !matches!(code, C::AllBrokersDown | C::BrokerTransportFailure);
            let mut last = self.last_error.lock().expect("last error lock");
            if specific || last.is_none() {
                *last = Some(format!("{code}: {reason}"));
            }
        }
        // librdkafka logged these connection failures already (see `log`).
        if matches!(
            code,
            Some(C::BrokerTransportFailure | C::Authentication | C::SSL)
        ) {
            debug!(sink = %self.sink, %error, "Kafka client error: {reason}");
        } else {
            warn!(sink = %self.sink, %error, "Kafka client error: {reason}");
        }
    }
}

/// The producer of one sink.
pub type SinkProducer = FutureProducer<SinkContext>;

/// Deliveries in a row whose every message timed out before weft asks
/// whether the brokers answer (and replaces the producer if they do).
const WEDGED_AFTER: u32 = 3;

/// The producer of one Kafka sink, built at startup.
pub struct KafkaProducer {
    settings: KafkaSettings,
    current: Mutex<Arc<SinkProducer>>,
    last_error: LastClientError,
    /// Deliveries in a row, on the current producer, whose every message
    /// timed out.
    timed_out_in_a_row: AtomicU32,
}

impl KafkaProducer {
    /// Builds the producer (it connects in the background). Fails on
    /// settings librdkafka rejects, e.g. a CA file it cannot parse.
    pub fn new(settings: KafkaSettings) -> Result<KafkaProducer, String> {
        let last_error = LastClientError::default();
        let producer = build(&settings, &last_error)?;
        Ok(KafkaProducer {
            settings,
            current: Mutex::new(Arc::new(producer)),
            last_error,
            timed_out_in_a_row: AtomicU32::new(0),
        })
    }

    /// The producer to send with.
    pub fn get(&self) -> Arc<SinkProducer> {
        Arc::clone(&self.current.lock().expect("producer lock"))
    }

    /// The last connection-level error since the last delivered message.
    pub fn last_client_error(&self) -> Option<String> {
        self.last_error.lock().expect("last error lock").clone()
    }

    /// Whether `producer` is still the one to send with.
    pub fn is_current(&self, producer: &Arc<SinkProducer>) -> bool {
        Arc::ptr_eq(&self.current.lock().expect("producer lock"), producer)
    }

    /// Records how a delivery on `used` went: whether any message was
    /// `delivered`, and whether `all_timed_out`. After `WEDGED_AFTER`
    /// deliveries in a row timed out entirely, if the brokers answer a
    /// metadata request, `used` is wedged and is replaced.
    pub async fn observe(&self, used: &Arc<SinkProducer>, delivered: bool, all_timed_out: bool) {
        if delivered {
            *self.last_error.lock().expect("last error lock") = None;
        }
        if delivered || !all_timed_out {
            self.timed_out_in_a_row.store(0, Ordering::Relaxed);
            return;
        }
        if self.timed_out_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 < WEDGED_AFTER {
            return;
        }
        self.timed_out_in_a_row.store(0, Ordering::Relaxed);
        let probe = Arc::clone(used);
        let wait = self
            .settings
            .limits
            .request_timeout
            .min(Duration::from_secs(5));
        let answered =
            tokio::task::spawn_blocking(move || probe.client().fetch_metadata(None, wait).is_ok())
                .await
                .unwrap_or(false);
        if answered {
            self.replace(
                used,
                "its messages keep timing out although the brokers answer",
            );
        }
    }

    /// Replaces `used` with a new producer unless that happened already.
    fn replace(&self, used: &Arc<SinkProducer>, why: &str) {
        let mut current = self.current.lock().expect("producer lock");
        if !Arc::ptr_eq(&current, used) {
            return;
        }
        match build(&self.settings, &self.last_error) {
            Ok(fresh) => {
                warn!(sink = %self.settings.sink, "replaced the Kafka producer: {why}");
                *current = Arc::new(fresh);
                self.timed_out_in_a_row.store(0, Ordering::Relaxed);
            }
            Err(error) => {
                warn!(sink = %self.settings.sink, %error, "cannot rebuild the Kafka producer")
            }
        }
    }

    /// If `used` hit a fatal error, replaces it with a new producer (a
    /// fresh producer id) so that later deliveries can proceed; returns the
    /// fatal error's description.
    pub fn replace_if_fatal(&self, used: &Arc<SinkProducer>) -> Option<String> {
        let (code, reason) = used.client().fatal_error()?;
        let fatal = format!("{reason} ({code})");
        self.replace(used, &format!("it failed fatally: {fatal}"));
        Some(fatal)
    }
}

/// A producer for `settings`.
fn build(settings: &KafkaSettings, last_error: &LastClientError) -> Result<SinkProducer, String> {
    let mut config = ClientConfig::new();
    for (name, value) in settings.producer_properties() {
        config.set(name, value);
    }
    config
        .create_with_context(SinkContext {
            sink: settings.sink.clone(),
            last_error: Arc::clone(last_error),
        })
        .map_err(|error| match error {
            // Its message quotes the value, which may be a secret.
            KafkaError::ClientConfig(_, description, name, _) => {
                format!("librdkafka rejected the Kafka producer setting `{name}`: {description}")
            }
            other => format!("cannot create the Kafka producer: {other}"),
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Compression;
    use super::*;
    use crate::delivery::{DeliveryLimits, RetryPolicy};

    fn settings(compression: Compression) -> KafkaSettings {
        KafkaSettings {
            sink: "t".into(),
            bootstrap_servers: "127.0.0.1:1".into(),
            topic: Some("t".into()),
            tls: false,
            tls_ca_pem: None,
            sasl: None,
            compression,
            limits: DeliveryLimits {
                batch_size: 10,
                max_in_flight: 1,
                request_timeout: Duration::from_secs(5),
                retry: RetryPolicy::default(),
            },
            max_queue_kbytes: 1024,
        }
    }

    #[test]
    fn every_compression_codec_is_compiled_in() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            KafkaProducer::new(settings(codec))
                .unwrap_or_else(|e| panic!("{}: {e}", codec.codec_name()));
        }
    }

    #[test]
    fn tls_and_every_sasl_mechanism_are_compiled_in() {
        use super::super::SaslMechanism;
        for mechanism in [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
        ] {
            let mut s = settings(Compression::None);
            s.tls = true;
            s.sasl = Some(super::super::SaslCredentials {
                mechanism,
                username: "u".into(),
                password: "p".into(),
            });
            KafkaProducer::new(s).unwrap_or_else(|e| panic!("{mechanism:?}: {e}"));
        }
    }

    #[test]
    fn a_bad_ca_is_rejected_without_quoting_it() {
        let mut s = settings(Compression::None);
        s.tls = true;
        s.tls_ca_pem = Some(
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n".into(),
        );
        let error = KafkaProducer::new(s).err().expect("a broken CA must fail");
        assert!(!error.contains("bm90IGEgY2VydA"), "{error}");
    }
}
