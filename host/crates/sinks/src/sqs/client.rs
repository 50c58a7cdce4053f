//! The AWS SDK client of one SQS sink, built on its first delivery (the
//! credential chain is built asynchronously, and building the sink starts
//! nothing).

use std::time::Duration;

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, SharedHttpClient};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use tokio::sync::OnceCell;

use super::{SqsCredentials, SqsSettings};

/// Longest wait for a TCP (and TLS) connection to SQS.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The lazily built client of one SQS sink.
pub struct SqsClient {
    settings: SqsSettings,
    client: OnceCell<Client>,
}

impl SqsClient {
    /// A client for `settings`, built on the first [`Self::get`].
    pub fn new(settings: SqsSettings) -> SqsClient {
        SqsClient {
            settings,
            client: OnceCell::new(),
        }
    }

    /// The client, built first if it was not yet. Building makes no request:
    /// credentials are fetched (and cached by the SDK) on the first send.
    pub async fn get(&self) -> &Client {
        self.client.get_or_init(|| build(&self.settings)).await
    }
}

/// The HTTPS client: rustls with ring (the provider the rest of weft uses)
/// and the system's root certificates; plain HTTP for an emulator.
fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

async fn build(settings: &SqsSettings) -> Client {
    let http = http_client();
    let region = Region::new(settings.region.clone());
    let request_timeout = settings.limits.request_timeout;
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(request_timeout.min(CONNECT_TIMEOUT))
        .operation_timeout(request_timeout)
        .build();
    let mut config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(region.clone())
        .endpoint_url(&settings.endpoint)
        .http_client(http.clone())
        .timeout_config(timeouts)
        // weft's delivery worker retries with backoff, per group, and
        // reports each failure; the SDK retrying too would multiply the
        // attempts and hide the errors.
        .retry_config(RetryConfig::disabled());
    config = match &settings.credentials {
        SqsCredentials::Keys {
            access_key_id,
            secret_access_key,
        } => config.credentials_provider(Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "weft sqs sink",
        )),
        SqsCredentials::Chain => {
            // The region given, not one the chain would look up itself
            // (on a host outside EC2, through a metadata request that has
            // to time out first).
            let chain = DefaultCredentialsChain::builder()
                .region(region.clone())
                .configure(
                    ProviderConfig::without_region()
                        .with_region(Some(region))
                        .with_http_client(http),
                )
                .build()
                .await;
            config.credentials_provider(chain)
        }
    };
    Client::from_conf(config.build())
}
