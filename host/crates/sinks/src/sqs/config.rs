//! The settings of an SQS sink: `destination:` as written ([`SqsConfig`]:
//! send to one Amazon SQS queue with `SendMessageBatch`), and resolved for
//! delivery ([`SqsSettings`]).

use std::fmt;

use serde::Deserialize;
use url::Url;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings};
use weft_config::hosts::{AllowedHost, HostError};

use crate::config::SinkConfig;
use crate::delivery::DeliveryLimits;

/// Most entries one `SendMessageBatch` request takes; also the largest
/// `batch_size`.
pub const MAX_BATCH_ENTRIES: u32 = 10;

/// How an SQS sink connects and delivers. Names follow Sequin's. `Debug`
/// hides `secret_access_key`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "sqs settings")]
pub struct SqsConfig {
    /// The queue's URL as SQS gives it,
    /// `https://sqs.<region>.amazonaws.com/<account id>/<queue name>`; a
    /// name ending in `.fifo` is a FIFO queue. Required.
    pub queue_url: String,
    /// The queue's AWS region. Default: read from `queue_url`'s host
    /// (`sqs.<region>.…`); required when the host does not name one.
    #[serde(default)]
    pub region: Option<String>,
    /// Access key id of the IAM user or role that sends. Needs
    /// `secret_access_key`; excludes `use_task_role`. Default none.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Secret access key for `access_key_id`. Default none; never logged.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Take credentials from the standard AWS chain instead of keys:
    /// environment variables, the shared profile (with `credential_process`),
    /// web identity (EKS), the ECS task role, the EC2 instance role.
    /// Default false.
    #[serde(default)]
    pub use_task_role: bool,
    /// Send to an emulator (LocalStack, moto) at `emulator_base_url`
    /// instead of the host of `queue_url`. Default false.
    #[serde(default)]
    pub use_emulator: bool,
    /// The emulator's base URL, e.g. `http://localhost:4566`. Required with
    /// `use_emulator: true`. Default none.
    #[serde(default)]
    pub emulator_base_url: Option<String>,
    /// Whether the queue is FIFO, as Sequin's config export writes it. weft
    /// reads this from `queue_url`; when given it must agree. Default none.
    #[serde(default)]
    pub is_fifo: Option<bool>,
    /// The shared delivery fields; SQS defaults: `batch_size` 10 (also the
    /// most it takes: one `SendMessageBatch`), `max_in_flight` 20,
    /// `request_timeout_ms` 30000.
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

impl PushSettings for SqsConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: MAX_BATCH_ENTRIES,
        // SQS scales out rather than up: ten messages a request, so more
        // requests at once than the brokers' sinks take.
        max_in_flight: 20,
        request_timeout_ms: 30_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

impl fmt::Debug for SqsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsConfig")
            .field("queue_url", &self.queue_url)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("use_task_role", &self.use_task_role)
            .field("use_emulator", &self.use_emulator)
            .field("emulator_base_url", &self.emulator_base_url)
            .field("is_fifo", &self.is_fifo)
            .field("delivery", &self.delivery)
            .finish()
    }
}

/// What `queue_url` should look like, for error messages.
const QUEUE_URL_FORM: &str = "`https://sqs.<region>.amazonaws.com/<12-digit account id>/<queue name>`, as the SQS console shows it or `aws sqs get-queue-url` prints it";

impl SqsConfig {
    /// Whether the queue is FIFO: its name ends in `.fifo`.
    pub fn fifo(&self) -> bool {
        self.queue_url.trim_end_matches('/').ends_with(".fifo")
    }

    /// The region: `region`, else the one `queue_url`'s host names.
    pub fn region(&self) -> Option<String> {
        match &self.region {
            Some(region) => Some(region.trim().to_string()),
            None => Url::parse(&self.queue_url)
                .ok()
                .and_then(|url| url.host_str().and_then(region_of_host)),
        }
    }

    /// The URL weft sends requests to: the emulator's with `use_emulator`,
    /// else `queue_url`'s scheme, host and port (which, for a queue URL as
    /// SQS gives it, is the region's SQS endpoint).
    pub fn endpoint(&self) -> Result<Url, String> {
        let (field, text) = match (&self.emulator_base_url, self.use_emulator) {
            (Some(base), true) => ("emulator_base_url", base.as_str()),
            _ => ("queue_url", self.queue_url.as_str()),
        };
        let url = Url::parse(text.trim())
            .map_err(|e| format!("`{field}` is not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "`{field}` must be an http:// or https:// URL with a host"
            ));
        }
        let mut origin = url.clone();
        origin.set_path("");
        origin.set_query(None);
        origin.set_fragment(None);
        Ok(origin)
    }

    /// The host and port weft connects to, for the account's
    /// `allow_hosts`: by the field that names it.
    pub fn egress_target(&self) -> (&'static str, Result<AllowedHost, HostError>) {
        let field = if self.use_emulator && self.emulator_base_url.is_some() {
            "emulator_base_url"
        } else {
            "queue_url"
        };
        let target = self.endpoint().map_err(HostError).and_then(|url| {
            let host = url.host_str().unwrap_or_default();
            let port = url
                .port_or_known_default()
                .ok_or_else(|| HostError(format!("`{field}` names no port")))?;
            AllowedHost::address(host, port)
        });
        (field, target)
    }

    /// Rules between fields: (field, what is wrong and what to do).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Some(problem) = queue_url_problem(&self.queue_url) {
            problems.push(("queue_url", problem));
        }
        match &self.region {
            Some(region) if !is_region_name(region.trim()) => problems.push((
                "region",
                format!("{region:?} is not an AWS region name; write it as AWS does, e.g. `region: us-east-1`"),
            )),
            Some(region) => {
                let named = Url::parse(self.queue_url.trim())
                    .ok()
                    .and_then(|url| url.host_str().and_then(region_of_host));
                if let Some(named) = named.filter(|named| named != region.trim()) {
                    problems.push((
                        "region",
                        format!("is {region:?}, but `queue_url` is a queue in {named:?}; requests are signed for `region`, so SQS would refuse them: remove `region` or make it {named:?}"),
                    ));
                }
            }
            None if self.region().is_none() && queue_url_problem(&self.queue_url).is_none() => {
                problems.push((
                    "region",
                    format!(
                        "cannot be read from `queue_url` {:?}, whose host does not name it (`sqs.<region>.amazonaws.com`); set `region`, e.g. `region: us-east-1`",
                        self.queue_url
                    ),
                ))
            }
            None => {}
        }
        self.credential_problems(&mut problems);
        match (self.use_emulator, &self.emulator_base_url) {
            (true, None) => problems.push((
                "emulator_base_url",
                "is required with `use_emulator: true`: the emulator's URL, e.g. `http://localhost:4566`".into(),
            )),
            (true, Some(_)) => {
                if let Err(problem) = self.endpoint() {
                    problems.push((
                        "emulator_base_url",
                        format!("{problem}, e.g. `http://localhost:4566`"),
                    ));
                }
            }
            (false, Some(_)) => problems.push((
                "emulator_base_url",
                "is only used with `use_emulator: true`; set that too, or remove this".into(),
            )),
            (false, None) => {}
        }
        if let Some(is_fifo) = self.is_fifo
            && is_fifo != self.fifo()
        {
            problems.push((
                "is_fifo",
                format!(
                    "is {is_fifo}, but the queue in `queue_url` is {}: a FIFO queue's name ends in `.fifo`; remove `is_fifo` (weft reads it from the URL) or fix `queue_url`",
                    if self.fifo() { "FIFO" } else { "a standard queue" }
                ),
            ));
        }
        if self.delivery.batch_size > MAX_BATCH_ENTRIES {
            problems.push((
                "batch_size",
                format!(
                    "is {}; one SQS SendMessageBatch request takes at most {MAX_BATCH_ENTRIES} messages: set 1 to {MAX_BATCH_ENTRIES} (raise `max_in_flight` for more throughput)",
                    self.delivery.batch_size
                ),
            ));
        }
        problems
    }

    /// Exactly one way to authenticate: both keys, or `use_task_role`.
    fn credential_problems(&self, problems: &mut Vec<(&'static str, String)>) {
        let (id, secret) = (
            self.access_key_id.is_some(),
            self.secret_access_key.is_some(),
        );
        match (id, secret, self.use_task_role) {
            (true, false, _) => problems.push((
                "access_key_id",
                "is set without `secret_access_key`; set both, or neither and `use_task_role: true`"
                    .into(),
            )),
            (false, true, _) => problems.push((
                "secret_access_key",
                "is set without `access_key_id`; set both, or neither and `use_task_role: true`"
                    .into(),
            )),
            (true, true, true) => problems.push((
                "use_task_role",
                "is true and `access_key_id`/`secret_access_key` are set too; choose one way to authenticate: the keys, or `use_task_role: true` (the standard AWS credential chain)".into(),
            )),
            (false, false, false) => problems.push((
                "access_key_id",
                "no credentials: set `access_key_id` and `secret_access_key`, or `use_task_role: true` to take them from the standard AWS chain (environment, profile, ECS task role, EC2 instance role)".into(),
            )),
            _ => {}
        }
        for (field, value) in [
            ("access_key_id", &self.access_key_id),
            ("secret_access_key", &self.secret_access_key),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                problems.push((field, "must not be empty".into()));
            }
        }
    }
}

/// What is wrong with `queue_url`, if anything.
fn queue_url_problem(queue_url: &str) -> Option<String> {
    let url = match Url::parse(queue_url.trim()) {
        Ok(url) => url,
        Err(e) => {
            return Some(format!(
                "{queue_url:?} is not a URL ({e}); write the queue's URL, {QUEUE_URL_FORM}"
            ));
        }
    };
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Some(format!(
            "{queue_url:?} is not an http(s) URL with a host; write the queue's URL, {QUEUE_URL_FORM}"
        ));
    }
    let segments: Vec<&str> = url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let [account, name] = segments.as_slice() else {
        return Some(format!(
            "{queue_url:?} does not end in `/<account id>/<queue name>`; write the queue's URL, {QUEUE_URL_FORM}"
        ));
    };
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return Some(format!(
            "{account:?} in {queue_url:?} is not a 12-digit AWS account id; write the queue's URL, {QUEUE_URL_FORM}"
        ));
    }
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    if name.len() > 80
        || stem.is_empty()
        || !stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Some(format!(
            "{name:?} is not an SQS queue name (1 to 80 ASCII letters, digits, `-` and `_`, FIFO queues ending in `.fifo`)"
        ));
    }
    None
}

/// The region an SQS host names: `sqs.<region>.…` (the regional endpoints,
/// VPC endpoints, LocalStack's `sqs.<region>.localhost.localstack.cloud`)
/// or the legacy `<region>.queue.amazonaws.com`.
pub fn region_of_host(host: &str) -> Option<String> {
    let labels: Vec<&str> = host.split('.').collect();
    labels.windows(2).find_map(|pair| match pair {
        ["sqs", region] if is_region_name(region) => Some(region.to_string()),
        [region, "queue"] if is_region_name(region) => Some(region.to_string()),
        _ => None,
    })
}

/// Whether `name` is shaped like an AWS region: `us-east-1`,
/// `us-gov-west-1`, `ap-southeast-5`.
fn is_region_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    parts.len() >= 3
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// How the sink authenticates. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum SqsCredentials {
    /// An access key pair.
    Keys {
        /// The access key id.
        access_key_id: String,
        /// The secret access key.
        secret_access_key: String,
    },
    /// The standard AWS credential chain (`use_task_role: true`).
    Chain,
}

impl fmt::Debug for SqsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqsCredentials::Keys { access_key_id, .. } => {
                write!(f, "Keys({access_key_id}, <redacted>)")
            }
            SqsCredentials::Chain => f.write_str("Chain"),
        }
    }
}

/// Everything an SQS sink needs to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSettings {
    /// The sink's name, for logs.
    pub sink: String,
    /// The queue's URL, sent with every request.
    pub queue_url: String,
    /// Whether the queue is FIFO (its messages need group and
    /// deduplication ids).
    pub fifo: bool,
    /// The region requests are signed for.
    pub region: String,
    /// Where requests go: scheme, host and port.
    pub endpoint: String,
    /// How requests are signed.
    pub credentials: SqsCredentials,
    /// Batch size, deliveries in flight, timeout and retries.
    pub limits: DeliveryLimits,
}

impl SqsSettings {
    /// The settings of the SQS sink `sink`, whose destination is `sqs`.
    /// Config validation has checked the rules between fields; this fails
    /// only on what it checked, with the same advice.
    pub fn resolve(sink: &SinkConfig, sqs: &SqsConfig) -> Result<SqsSettings, String> {
        let region = sqs.region().ok_or_else(|| {
            "the sqs sink's region cannot be read from `queue_url`; set `region`".to_string()
        })?;
        let endpoint = sqs.endpoint()?;
        let credentials = match (&sqs.access_key_id, &sqs.secret_access_key) {
            (Some(id), Some(secret)) if !sqs.use_task_role => SqsCredentials::Keys {
                access_key_id: id.trim().to_string(),
                secret_access_key: secret.trim().to_string(),
            },
            _ => SqsCredentials::Chain,
        };
        Ok(SqsSettings {
            sink: sink.name.clone(),
            queue_url: sqs.queue_url.trim().to_string(),
            fifo: sqs.fifo(),
            region,
            endpoint: endpoint.as_str().trim_end_matches('/').to_string(),
            credentials,
            limits: DeliveryLimits::resolve(sink, &sqs.delivery),
        })
    }
}

#[cfg(test)]
mod tests {
    use weft_config::destination::push_settings_of;

    use super::*;
    use crate::config::Config;

    const QUEUE: &str = "https://sqs.eu-central-1.amazonaws.com/123456789012/orders";

    fn read(yaml: &str) -> SqsConfig {
        push_settings_of(serde_yaml_ng::from_str(yaml).unwrap()).unwrap()
    }

    fn problems(yaml: &str) -> Vec<(&'static str, String)> {
        read(yaml).problems()
    }

    /// The one problem of `yaml`, on `field`.
    fn problem(yaml: &str, field: &str) -> String {
        let problems = problems(yaml);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].0, field, "{problems:#?}");
        problems[0].1.clone()
    }

    /// Loads a whole config whose only sink has `destination`.
    fn load(destination: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "databases:\n  - {{ name: db, hostname: 127.0.0.1, database: db, slot: {{ name: s }}, publication: {{ name: p }} }}\nsinks:\n  - name: out\n    database: db\n    destination: {destination}\n"
        );
        Config::from_yaml(&yaml, dir.path(), &|_| None).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_the_region_read_from_the_queue_url() {
        let config = read(&format!(
            "{{queue_url: {QUEUE}, access_key_id: AKIA1, secret_access_key: hunter2}}"
        ));
        assert!(config.problems().is_empty(), "{:?}", config.problems());
        assert_eq!(config.region().as_deref(), Some("eu-central-1"));
        assert!(!config.fifo());
        assert_eq!(
            config.endpoint().unwrap().as_str(),
            "https://sqs.eu-central-1.amazonaws.com/"
        );
        assert_eq!(
            (
                config.delivery.batch_size,
                config.delivery.max_in_flight,
                config.delivery.request_timeout_ms
            ),
            (10, 20, 30_000)
        );
        assert!(!format!("{config:?}").contains("hunter2"));
        assert!(format!("{config:?}").contains("AKIA1"));
    }

    #[test]
    fn regions_are_read_from_every_sqs_host_form() {
        for (host, region) in [
            ("sqs.us-east-1.amazonaws.com", Some("us-east-1")),
            ("sqs.us-gov-west-1.amazonaws.com", Some("us-gov-west-1")),
            ("sqs.cn-north-1.amazonaws.com.cn", Some("cn-north-1")),
            (
                "vpce-0a1b-c2d3.sqs.ap-southeast-2.vpce.amazonaws.com",
                Some("ap-southeast-2"),
            ),
            ("sqs.us-east-1.localhost.localstack.cloud", Some("us-east-1")),
            ("eu-west-1.queue.amazonaws.com", Some("eu-west-1")),
            ("queue.amazonaws.com", None),
            ("sqs.amazonaws.com", None),
            ("127.0.0.1", None),
            ("localhost", None),
        ] {
            assert_eq!(region_of_host(host).as_deref(), region, "{host}");
        }
    }

    #[test]
    fn a_region_that_cannot_be_read_must_be_set() {
        let yaml = "{queue_url: 'http://127.0.0.1:4566/000000000000/orders', use_task_role: true}";
        let error = problem(yaml, "region");
        assert!(error.contains("cannot be read from `queue_url`"), "{error}");
        assert!(error.contains("set `region`, e.g. `region: us-east-1`"), "{error}");
        let set = read(
            "{queue_url: 'http://127.0.0.1:4566/000000000000/orders', use_task_role: true, region: us-west-2}",
        );
        assert!(set.problems().is_empty(), "{:?}", set.problems());
        assert_eq!(set.region().as_deref(), Some("us-west-2"));
    }

    #[test]
    fn a_region_must_agree_with_the_queue_url() {
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, region: us-east-1}}"),
            "region",
        );
        assert!(error.contains("a queue in \"eu-central-1\""), "{error}");
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, region: Frankfurt}}"),
            "region",
        );
        assert!(error.contains("not an AWS region name"), "{error}");
    }

    #[test]
    fn a_queue_url_must_name_an_account_and_a_queue() {
        for (url, says) in [
            ("orders", "is not a URL"),
            ("ftp://sqs.us-east-1.amazonaws.com/123456789012/q", "http(s) URL"),
            ("https://sqs.us-east-1.amazonaws.com/orders", "does not end in `/<account id>/<queue name>`"),
            ("https://sqs.us-east-1.amazonaws.com/1234/orders", "not a 12-digit AWS account id"),
            ("https://sqs.us-east-1.amazonaws.com/123456789012/or ders", "not an SQS queue name"),
            ("arn:aws:sqs:us-east-1:123456789012:orders", "http(s) URL"),
        ] {
            let problems = problems(&format!("{{queue_url: '{url}', use_task_role: true}}"));
            assert!(
                problems.iter().any(|(field, p)| *field == "queue_url" && p.contains(says)),
                "{url}: {problems:#?}"
            );
        }
    }

    #[test]
    fn a_fifo_queue_is_read_from_its_name() {
        let fifo = read(&format!("{{queue_url: '{QUEUE}.fifo', use_task_role: true}}"));
        assert!(fifo.fifo());
        assert!(fifo.problems().is_empty(), "{:?}", fifo.problems());
        // Sequin's config export writes is_fifo; it must agree.
        let agreeing = read(&format!(
            "{{queue_url: '{QUEUE}.fifo', use_task_role: true, is_fifo: true}}"
        ));
        assert!(agreeing.problems().is_empty());
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, is_fifo: true}}"),
            "is_fifo",
        );
        assert!(error.contains("a standard queue"), "{error}");
    }

    #[test]
    fn exactly_one_way_to_authenticate() {
        let error = problem(&format!("{{queue_url: {QUEUE}}}"), "access_key_id");
        assert!(
            error.contains("set `access_key_id` and `secret_access_key`, or `use_task_role: true`"),
            "{error}"
        );
        let error = problem(
            &format!("{{queue_url: {QUEUE}, access_key_id: AKIA1}}"),
            "access_key_id",
        );
        assert!(error.contains("without `secret_access_key`"), "{error}");
        let error = problem(
            &format!("{{queue_url: {QUEUE}, secret_access_key: hunter2}}"),
            "secret_access_key",
        );
        assert!(error.contains("without `access_key_id`"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        let error = problem(
            &format!(
                "{{queue_url: {QUEUE}, access_key_id: AKIA1, secret_access_key: hunter2, use_task_role: true}}"
            ),
            "use_task_role",
        );
        assert!(error.contains("choose one way to authenticate"), "{error}");
        assert!(problems(&format!("{{queue_url: {QUEUE}, use_task_role: true}}")).is_empty());
    }

    #[test]
    fn the_emulator_needs_its_url_and_is_where_weft_connects() {
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, use_emulator: true}}"),
            "emulator_base_url",
        );
        assert!(error.contains("is required with `use_emulator: true`"), "{error}");
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, emulator_base_url: 'http://localhost:4566'}}"),
            "emulator_base_url",
        );
        assert!(error.contains("only used with `use_emulator: true`"), "{error}");
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, use_emulator: true, emulator_base_url: 'localhost:4566'}}"),
            "emulator_base_url",
        );
        assert!(error.contains("http:// or https://"), "{error}");
        let emulated = read(&format!(
            "{{queue_url: {QUEUE}, use_task_role: true, use_emulator: true, emulator_base_url: 'http://127.0.0.1:5000/'}}"
        ));
        assert!(emulated.problems().is_empty());
        assert_eq!(emulated.endpoint().unwrap().as_str(), "http://127.0.0.1:5000/");
        let (field, target) = emulated.egress_target();
        assert_eq!((field, target.unwrap().to_string()), ("emulator_base_url", "127.0.0.1:5000".into()));
        let (field, target) = read(&format!("{{queue_url: {QUEUE}, use_task_role: true}}")).egress_target();
        assert_eq!(
            (field, target.unwrap().to_string()),
            ("queue_url", "sqs.eu-central-1.amazonaws.com:443".into())
        );
    }

    #[test]
    fn batch_size_is_at_most_ten() {
        let error = problem(
            &format!("{{queue_url: {QUEUE}, use_task_role: true, batch_size: 11}}"),
            "batch_size",
        );
        assert!(error.contains("at most 10 messages: set 1 to 10"), "{error}");
        let ten = read(&format!("{{queue_url: {QUEUE}, use_task_role: true, batch_size: 10}}"));
        assert!(ten.problems().is_empty());
    }

    #[test]
    fn a_whole_config_reports_problems_at_their_paths() {
        let error = load(&format!("{{type: sqs, queue_url: {QUEUE}, batch_size: 50, use_task_role: true}}"))
            .unwrap_err();
        assert!(
            error.contains("sinks[0].destination.batch_size: is 50; one SQS SendMessageBatch request takes at most 10"),
            "{error}"
        );
        let error = load(&format!("{{type: sqs, queue_url: {QUEUE}, secret_access_key: hunter2}}"))
            .unwrap_err();
        assert!(error.contains("sinks[0].destination.secret_access_key:"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        let error = load(&format!("{{type: sqs, queue_url: {QUEUE}, use_task_role: true, queue: x}}"))
            .unwrap_err();
        assert!(error.contains("unknown field `queue`"), "{error}");
        let config = load(&format!(
            "{{type: sqs, queue_url: '{QUEUE}.fifo', access_key_id: AKIA1, secret_access_key: hunter2, max_in_flight: 4}}"
        ))
        .unwrap();
        let sink = config.sink("out").unwrap();
        let crate::DestinationConfig::Sqs(sqs) = &sink.destination else {
            panic!("expected an sqs destination");
        };
        let settings = SqsSettings::resolve(sink, sqs).unwrap();
        assert!(settings.fifo);
        assert_eq!(settings.region, "eu-central-1");
        assert_eq!(settings.endpoint, "https://sqs.eu-central-1.amazonaws.com");
        assert_eq!(settings.limits.max_in_flight, 4);
        assert_eq!(
            settings.credentials,
            SqsCredentials::Keys {
                access_key_id: "AKIA1".into(),
                secret_access_key: "hunter2".into()
            }
        );
        assert!(!format!("{settings:?}").contains("hunter2"));
    }
}
