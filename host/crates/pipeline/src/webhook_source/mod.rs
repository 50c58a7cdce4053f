//! Webhook sources: external systems POST messages to
//! `/api/webhook_sources/{name}`, and they flow through the same functions
//! and sinks as database changes (see `docs/webhook_sources.md`).
//!
//! Acceptance and processing are split at the store, so that an accepted
//! message is never lost and a slow or failing function never fails a
//! request:
//!
//! 1. The API checks the request ([`auth`], [`body`]) and stores it in the
//!    source's log, with its `Idempotency-Key`, in one SQLite transaction
//!    ([`weft_store::Store::accept_webhook`]); only then does it answer
//!    2xx. A SIGKILL after that loses nothing.
//! 2. The source's `feed` reads the log in acceptance order into a
//!    [`crate::Pipeline`] of the sinks that take the source. That
//!    pipeline is the one databases use: each sink's functions run there,
//!    and a transient function failure holds the message for a retry, in
//!    the store, instead of failing the request. Messages of one source
//!    form one message group, so each sink delivers them in acceptance
//!    order.
//! 3. Once every sink has stored a request's messages, it leaves the log.

pub mod auth;
pub mod body;
mod feed;

use std::sync::Arc;

use tokio::sync::Notify;

pub use feed::WebhookFeed;

use weft_sinks::config::WebhookSourceConfig;

/// What the API needs to accept requests for one webhook source. Cheap to
/// clone.
#[derive(Clone)]
pub struct WebhookIngress {
    config: Arc<WebhookSourceConfig>,
    accepted: Arc<Notify>,
}

impl std::fmt::Debug for WebhookIngress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookIngress")
            .field("config", &self.config)
            .finish()
    }
}

impl WebhookIngress {
    /// The ingress of the source configured as `config`, and the feed that
    /// takes what it accepts from `store` into the source's pipeline.
    pub fn new(config: &WebhookSourceConfig, store: weft_store::Store) -> (Self, WebhookFeed) {
        let accepted = Arc::new(Notify::new());
        let feed = WebhookFeed::new(
            &config.name,
            store,
            Arc::clone(&accepted),
            config.idempotency_key_retention(),
        );
        let ingress = WebhookIngress {
            config: Arc::new(config.clone()),
            accepted,
        };
        (ingress, feed)
    }

    /// The source's config.
    pub fn config(&self) -> &WebhookSourceConfig {
        &self.config
    }

    /// Tells the feed that a request was stored.
    pub fn wake(&self) {
        self.accepted.notify_one();
    }
}
