//! One librdkafka producer per sink, replaced when librdkafka declares it
//! unusable (a fatal error of the idempotent producer).

use std::sync::{Arc, Mutex};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, Producer};
use tracing::{debug, info, warn};

use super::KafkaSettings;

/// Routes librdkafka's logs and errors to weft's log, tagged with the sink.
pub struct SinkContext {
    sink: String,
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
        warn!(sink = %self.sink, %error, "Kafka client error: {reason}");
    }
}

/// The producer of one sink.
pub type SinkProducer = FutureProducer<SinkContext>;

/// The producer of one Kafka sink, built at startup.
pub struct KafkaProducer {
    settings: KafkaSettings,
    current: Mutex<Arc<SinkProducer>>,
}

impl KafkaProducer {
    /// Builds the producer (it connects in the background). Fails on
    /// settings librdkafka rejects, e.g. a CA file it cannot parse.
    pub fn new(settings: KafkaSettings) -> Result<KafkaProducer, String> {
        let producer = build(&settings)?;
        Ok(KafkaProducer {
            settings,
            current: Mutex::new(Arc::new(producer)),
        })
    }

    /// The producer to send with.
    pub fn get(&self) -> Arc<SinkProducer> {
        Arc::clone(&self.current.lock().expect("producer lock"))
    }

    /// If `used` hit a fatal error, replaces it with a new producer (a
    /// fresh producer id) so that later deliveries can proceed; returns the
    /// fatal error's description.
    pub fn replace_if_fatal(&self, used: &Arc<SinkProducer>) -> Option<String> {
        let (code, reason) = used.client().fatal_error()?;
        let mut current = self.current.lock().expect("producer lock");
        if Arc::ptr_eq(&current, used) {
            match build(&self.settings) {
                Ok(fresh) => {
                    warn!(sink = %self.settings.sink, %code, %reason, "Kafka producer hit a fatal error; replaced it");
                    *current = Arc::new(fresh);
                }
                Err(error) => {
                    warn!(sink = %self.settings.sink, %error, "cannot rebuild the Kafka producer")
                }
            }
        }
        Some(format!("{reason} ({code})"))
    }
}

/// A producer for `settings`.
fn build(settings: &KafkaSettings) -> Result<SinkProducer, String> {
    let mut config = ClientConfig::new();
    for (name, value) in settings.producer_properties() {
        config.set(name, value);
    }
    config
        .create_with_context(SinkContext {
            sink: settings.sink.clone(),
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

    use super::*;
    use crate::config::destination::Compression;
    use crate::sinks::delivery::RetryPolicy;

    fn settings(compression: Compression) -> KafkaSettings {
        KafkaSettings {
            sink: "t".into(),
            bootstrap_servers: "127.0.0.1:1".into(),
            topic: Some("t".into()),
            tls: false,
            tls_ca_pem: None,
            sasl: None,
            compression,
            batch_size: 10,
            max_in_flight: 1,
            request_timeout: Duration::from_secs(5),
            max_queue_kbytes: 1024,
            retry: RetryPolicy::default(),
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
        use crate::config::destination::SaslMechanism;
        for mechanism in [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
        ] {
            let mut s = settings(Compression::None);
            s.tls = true;
            s.sasl = Some(super::super::settings::SaslCredentials {
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
