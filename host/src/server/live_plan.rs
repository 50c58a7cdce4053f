//! Which changes of a config a running weft makes in place: the sinks
//! created, updated and deleted, and the database feeds that stop or start
//! ([`LivePlan`]); anything else needs a restart of every pipeline.

use super::live_sinks::{Feed, LiveSinks, lock};
use weft_sinks::config::destination::Reference;
use weft_sinks::config::{Config, Destination as _, HttpEndpointConfig, SinkConfig};
use weft_wasm::http_egress::HttpEgress;

/// What a config changes in place: its sink changes, and the databases
/// whose feed stops (deleted or changed) or starts (a first sink, or
/// changed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LivePlan {
    /// Sinks created, updated and deleted.
    pub sinks: Vec<SinkOp>,
    /// Databases whose running feed stops.
    pub stop: Vec<String>,
    /// Databases whose feed starts.
    pub start: Vec<String>,
}

impl LivePlan {
    /// Whether `feed` stops or starts, so that its sinks change with it.
    pub(super) fn restarts(&self, feed: &Feed) -> bool {
        matches!(feed, Feed::Database(name) if self.stop.contains(name) || self.start.contains(name))
    }
}

/// One change to the set of sinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkOp {
    /// A new sink.
    Create {
        /// Its name.
        sink: String,
    },
    /// A sink whose config (or http endpoint) changed.
    Update {
        /// Its name.
        sink: String,
        /// Its old feed, when it moved to another one.
        moved_from: Option<Feed>,
    },
    /// A sink that goes away.
    Delete {
        /// Its name.
        sink: String,
        /// The feed it leaves.
        feed: Feed,
    },
}

impl LiveSinks {
    /// The changes from `running` to `proposed`, when they can be applied
    /// without a restart: nothing but databases, sinks, functions, API
    /// tokens, http endpoints and accounts differs.
    pub fn plan(&self, running: &Config, proposed: &Config) -> Option<LivePlan> {
        let feeds = lock(&self.feeds);
        live_plan(running, proposed, |feed| feeds.contains_key(feed))
    }
}

/// The changes from `running` to `proposed`, or `None` when they need a
/// restart: something beyond databases, sinks, functions, tokens,
/// endpoints and accounts differs, or a sink's webhook source does not
/// `runs`. A database feed that `runs` stops when its entry changes or
/// goes; one that does not run starts when it has sinks (again, for a
/// changed one).
fn live_plan(
    running: &Config,
    proposed: &Config,
    runs: impl Fn(&Feed) -> bool,
) -> Option<LivePlan> {
    if without_live_parts(running) != without_live_parts(proposed) {
        return None;
    }
    let mut plan = LivePlan::default();
    for old in &running.databases {
        let feed = Feed::Database(old.name.clone());
        if runs(&feed) && proposed.database(&old.name) != Some(old) {
            plan.stop.push(old.name.clone());
        }
    }
    for database in &proposed.databases {
        let feed = Feed::Database(database.name.clone());
        let has_sinks = proposed
            .sinks
            .iter()
            .any(|s| s.takes_database(&database.name));
        if has_sinks && (!runs(&feed) || plan.stop.contains(&database.name)) {
            plan.start.push(database.name.clone());
        }
    }
    for old in &running.sinks {
        if !proposed.sinks.iter().any(|s| s.name == old.name) {
            plan.sinks.push(SinkOp::Delete {
                sink: old.name.clone(),
                feed: Feed::of(old)?,
            });
        }
    }
    for new in &proposed.sinks {
        let feed = Feed::of(new)?;
        if !runs(&feed) && !plan.restarts(&feed) {
            return None;
        }
        match running.sinks.iter().find(|s| s.name == new.name) {
            None => plan.sinks.push(SinkOp::Create {
                sink: new.name.clone(),
            }),
            Some(old)
                if old != new
                    || http_endpoint(running, old) != http_endpoint(proposed, new)
                    || http_egress(running, old) != http_egress(proposed, new) =>
            {
                let old_feed = Feed::of(old)?;
                plan.sinks.push(SinkOp::Update {
                    sink: new.name.clone(),
                    moved_from: (old_feed != feed).then_some(old_feed),
                });
            }
            Some(_) => {}
        }
    }
    Some(plan)
}

/// `config` without the parts a running weft changes in place.
fn without_live_parts(config: &Config) -> Config {
    Config {
        databases: Vec::new(),
        sinks: Vec::new(),
        functions: Vec::new(),
        api_tokens: Vec::new(),
        http_endpoints: Vec::new(),
        // Account limits and capabilities bound what the config may hold,
        // checked as it loads; what running sinks and functions read of
        // them (deny_internal_http) makes those change with them.
        accounts: Vec::new(),
        ..config.clone()
    }
}

/// Where the requests of a sink that delivers to an http endpoint may
/// connect, by its account; `None` for other sinks, which make no HTTP
/// requests.
fn http_egress(config: &Config, sink: &SinkConfig) -> Option<HttpEgress> {
    endpoint_name(sink).map(|_| HttpEgress::of_account(config, sink.account.as_deref()))
}

/// The http endpoint a sink delivers to, if it delivers to one.
fn http_endpoint<'a>(config: &'a Config, sink: &SinkConfig) -> Option<&'a HttpEndpointConfig> {
    endpoint_name(sink).and_then(|name| config.http_endpoint(&name))
}

/// The name of the http endpoint a sink's destination uses, if any.
fn endpoint_name(sink: &SinkConfig) -> Option<String> {
    sink.destination
        .references()
        .into_iter()
        .find_map(|reference| match reference {
            Reference::HttpEndpoint(name) => Some(name),
            Reference::Database(_) => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATABASES: &str = "databases:\n  - { name: a, hostname: localhost, database: a, username: u, slot: { name: sa }, publication: { name: pa } }\n  - { name: b, hostname: localhost, database: b, username: u, slot: { name: sb }, publication: { name: pb } }\n";

    fn config(sinks: &str, more: &str) -> Config {
        let sinks = if sinks.is_empty() { " []\n" } else { "\n" }.to_string() + sinks;
        let text = format!("{DATABASES}{more}sinks:{sinks}");
        Config::from_yaml(&text, std::path::Path::new("."), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn sink(name: &str, database: &str, table: &str) -> String {
        format!(
            "  - {{ name: {name}, database: {database}, source: {{ include_tables: [public.{table}] }}, destination: {{ type: sequin_stream }} }}\n"
        )
    }

    fn hook(name: &str, url: &str) -> (String, String) {
        (
            format!(
                "  - {{ name: {name}, database: a, destination: {{ type: webhook, http_endpoint: ep }} }}\n"
            ),
            format!("http_endpoints:\n  - {{ name: ep, url: \"{url}\" }}\n"),
        )
    }

    /// Every feed runs but `b`'s.
    fn all_but_b(feed: &Feed) -> bool {
        *feed != Feed::Database("b".into())
    }

    #[test]
    fn created_updated_moved_and_deleted_sinks_apply_in_place() {
        let running = config(
            &[
                sink("kept", "a", "t"),
                sink("changed", "a", "t"),
                sink("moved", "a", "t"),
                sink("gone", "a", "t"),
                sink("on-b", "b", "t"),
            ]
            .concat(),
            "",
        );
        let proposed = config(
            &[
                sink("kept", "a", "t"),
                sink("changed", "a", "u"),
                sink("moved", "b", "t"),
                sink("new", "b", "t"),
                sink("on-b", "b", "t"),
            ]
            .concat(),
            "",
        );
        let plan = live_plan(&running, &proposed, |_| true).unwrap();
        assert_eq!(
            plan,
            LivePlan {
                sinks: vec![
                    SinkOp::Delete {
                        sink: "gone".into(),
                        feed: Feed::Database("a".into())
                    },
                    SinkOp::Update {
                        sink: "changed".into(),
                        moved_from: None
                    },
                    SinkOp::Update {
                        sink: "moved".into(),
                        moved_from: Some(Feed::Database("a".into()))
                    },
                    SinkOp::Create { sink: "new".into() },
                ],
                stop: vec![],
                start: vec![],
            }
        );
        assert_eq!(
            live_plan(&running, &running, |_| true),
            Some(LivePlan::default())
        );
    }

    #[test]
    fn a_changed_http_endpoint_updates_the_webhook_sinks_using_it() {
        let (sinks, old) = hook("h", "http://127.0.0.1:1/old");
        let (_, new) = hook("h", "http://127.0.0.1:1/new");
        let plan = live_plan(&config(&sinks, &old), &config(&sinks, &new), |_| true).unwrap();
        assert_eq!(
            plan.sinks,
            vec![SinkOp::Update {
                sink: "h".into(),
                moved_from: None
            }]
        );
    }

    #[test]
    fn an_accounts_deny_internal_http_updates_its_webhook_sinks_only() {
        let (hook_sink, endpoint) = hook("h", "http://hooks.example/in");
        let sinks = [hook_sink, sink("s", "a", "t")].concat();
        let running = config(&sinks, &endpoint);
        let mut denied = running.clone();
        denied
            .accounts
            .push(weft_sinks::config::account::AccountConfig {
                name: "acme".into(),
                limits: Default::default(),
                allow_capabilities: Vec::new(),
                allow_hosts: None,
                deny_internal_http: true,
            });
        // The account owns nothing yet: nothing running changes.
        assert_eq!(
            live_plan(&running, &denied, |_| true),
            Some(LivePlan::default())
        );
        let mut owned = running.clone();
        for sink in &mut owned.sinks {
            sink.account = Some("acme".into());
        }
        owned.accounts = denied.accounts.clone();
        let mut allowed = owned.clone();
        allowed.accounts[0].deny_internal_http = false;
        let plan = live_plan(&allowed, &owned, |_| true).unwrap();
        assert_eq!(
            plan.sinks,
            vec![SinkOp::Update {
                sink: "h".into(),
                moved_from: None
            }],
            "the webhook sink connects anew; the pull sink makes no requests"
        );
    }

    #[test]
    fn a_first_sink_starts_its_database_and_a_changed_database_restarts_alone() {
        let running = config(&sink("s", "a", "t"), "");
        let first_on_b = config(&[sink("s", "a", "t"), sink("n", "b", "t")].concat(), "");
        let plan = live_plan(&running, &first_on_b, all_but_b).unwrap();
        assert_eq!((plan.stop, plan.start), (vec![], vec!["b".to_string()]));
        assert_eq!(plan.sinks, vec![SinkOp::Create { sink: "n".into() }]);

        let mut moved_port = running.clone();
        moved_port.databases[0].connection.port = 5433;
        moved_port.databases[1].connection.port = 5433;
        let plan = live_plan(&running, &moved_port, all_but_b).unwrap();
        assert_eq!(
            (plan.stop, plan.start, plan.sinks),
            (vec!["a".to_string()], vec!["a".to_string()], vec![]),
            "only the running feed restarts; b has no sinks to start"
        );

        let gone = config("", "");
        let plan = live_plan(&running, &gone, all_but_b).unwrap();
        assert_eq!(
            (plan.stop, plan.start),
            (vec![], vec![]),
            "a keeps running without sinks"
        );
    }

    #[test]
    fn other_sections_need_a_restart() {
        let running = config(&sink("s", "a", "t"), "");
        let mut registry = running.clone();
        registry.plugin_registry.max_component_mb += 1;
        assert_eq!(live_plan(&running, &registry, |_| true), None);
    }
}
