//! Secrets stay out of weft's log: a database password (SCRAM), a
//! webhook's encrypted header and the metrics password, with debug logging
//! on and the webhook failing (so errors about it are logged), out of what
//! `weft check` prints about a config that holds them, and out of
//! `config export` (the API's and the CLI's) unless asked for explicitly.

use std::time::Duration;

use crate::harness::postgres::{PgCluster, PgOptions};
use crate::harness::webhook_receiver::{Mode, Receiver};
use crate::harness::weft::WeftProcess;

const PG_PASSWORD: &str = "pg-s3cret-7341";
const HOOK_TOKEN: &str = "Bearer hook-s3cret-9152";
const METRICS_PASSWORD: &str = "metrics-s3cret-5508";

fn config(pg: &PgCluster, receiver: &Receiver) -> String {
    format!(
        r#"databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: alice
    password: {PG_PASSWORD}
    slot: {{ name: weft_secrets, create_if_not_exists: true }}
    publication: {{ name: weft_secrets, create_if_not_exists: true }}
http_endpoints:
  - name: receiver
    url: http://{addr}
    encrypted_headers: {{ Authorization: "{HOOK_TOKEN}" }}
sinks:
  - name: hook
    database: shop
    source: {{ include_tables: [public.items] }}
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /batch
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 200
"#,
        port = pg.port(),
        addr = receiver.addr,
    )
}

#[test]
fn secrets_never_reach_the_log_the_config_checker_or_config_export() {
    let pg = PgCluster::start_with(PgOptions {
        hba_rules: vec!["host all alice 127.0.0.1/32 scram-sha-256".into()],
        ..Default::default()
    });
    pg.psql(&format!(
        "SET password_encryption = 'scram-sha-256';
         CREATE ROLE alice SUPERUSER LOGIN REPLICATION PASSWORD '{PG_PASSWORD}';
         CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)"
    ));
    let receiver = Receiver::start(Mode::Fail);
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start_with_env(
        dir.path(),
        &config(&pg, &receiver),
        &[
            ("WEFT_METRICS_USERNAME", "prom"),
            ("WEFT_METRICS_PASSWORD", METRICS_PASSWORD),
        ],
    );
    pg.wait_for_active_slot("weft_secrets");
    pg.psql("INSERT INTO items SELECT g, g FROM generate_series(1, 5) g");
    // The test receiver refuses these requests (they lack the signature
    // and headers it checks for): weft logs the failures and retries.
    receiver.wait_until("failed deliveries", Duration::from_secs(30), |s| {
        s.failed + s.bad_requests.len() >= 3
    });
    // The log file trails the receiver a little: wait for the failures.
    let log = weft.wait_until(
        "delivery errors in the log",
        Duration::from_secs(30),
        || {
            let log = weft.log_text();
            if log.contains("HTTP 500") || log.contains("retrying later") {
                Ok(log)
            } else {
                Err("not yet")
            }
        },
    );
    for secret in [PG_PASSWORD, "hook-s3cret-9152", METRICS_PASSWORD] {
        assert!(!log.contains(secret), "{secret} is in the log");
    }
    let health = weft.health().to_string();
    for secret in [PG_PASSWORD, "hook-s3cret-9152", METRICS_PASSWORD] {
        assert!(!health.contains(secret), "{secret} is in /api/health");
    }

    // A config with a mistake next to the secrets: the checker names the
    // mistake and prints no secret.
    let broken = config(&pg, &receiver).replace("type: webhook", "type: webhok");
    let path = dir.path().join("broken.yml");
    std::fs::write(&path, broken).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(2), "{printed}");
    assert!(printed.contains("webhok"), "{printed}");
    for secret in [PG_PASSWORD, "hook-s3cret-9152"] {
        assert!(
            !printed.contains(secret),
            "{secret} printed by check:\n{printed}"
        );
    }

    // config export: the running config from the API, and the file from the
    // CLI, with every secret redacted; the CLI shows them only when asked.
    let exported = weft.get_json("/api/config/export");
    let yaml = exported["yaml"].as_str().expect("{\"yaml\": ...}");
    assert!(
        yaml.contains("weft_secrets"),
        "the config is exported:\n{yaml}"
    );
    assert!(yaml.contains("(redacted)"), "{yaml}");
    let file = dir.path().join("weft.yml");
    std::fs::write(&file, config(&pg, &receiver)).unwrap();
    let export = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["config", "export", "--config"])
            .arg(&file)
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let redacted = export(&[]);
    for text in [yaml, redacted.as_str()] {
        for secret in [PG_PASSWORD, "hook-s3cret-9152"] {
            assert!(!text.contains(secret), "{secret} exported:\n{text}");
        }
    }
    let shown = export(&["--show-secrets"]);
    for secret in [PG_PASSWORD, "hook-s3cret-9152"] {
        assert!(
            shown.contains(secret),
            "--show-secrets shows {secret}:\n{shown}"
        );
    }
}
