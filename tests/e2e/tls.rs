//! TLS on both source connections (`sslmode` as libpq reads it) and SCRAM
//! over TLS, against real clusters serving certificates from a test CA.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use weft_core::change::SourceEvent;
use weft_core::lsn::Lsn;
use weft_postgres::protocol::ReplicationConnection;
use weft_postgres::{PgConnectOptions, PgError};
use weft_source::SourceError;
use weft_source::events;

use crate::harness::certs::TestCa;
use crate::harness::postgres::{PgCluster, PgOptions, ServerTls};

/// A cluster serving a certificate for `localhost` only, signed by `ca`.
fn tls_cluster(ca: &TestCa, tls_only: bool, hba_rules: Vec<String>) -> PgCluster {
    PgCluster::start_with(PgOptions {
        tls: Some(ServerTls {
            files: ca.issue_server("server", &["DNS:localhost"]),
            tls_only,
            client_ca: None,
        }),
        hba_rules,
        ..Default::default()
    })
}

fn url(host: &str, port: u16, db: &str, params: &str) -> String {
    format!("postgres://postgres@{host}:{port}/{db}?{params}")
}

/// Connects both ways (replication and query); both must succeed or both
/// fail (TLS failures with the same message). Returns the replication
/// connection's error.
async fn connect_both(url: &str) -> Result<(), PgError> {
    let options = PgConnectOptions::from_url(url)?;
    let replication = ReplicationConnection::connect(&options).await;
    let query = options.connect_query().await;
    match (replication, query) {
        (Ok(mut conn), Ok((client, _task))) => {
            conn.identify_system().await?;
            let row = client
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await
                .expect("read pg_stat_ssl");
            let _: bool = row.get(0);
            conn.close().await;
            Ok(())
        }
        (Err(a), Err(b)) => {
            if matches!(a, PgError::Tls { .. } | PgError::TlsRequired { .. }) {
                assert_eq!(
                    a.to_string(),
                    b.to_string(),
                    "both connections explain a TLS failure the same way"
                );
            }
            Err(a)
        }
        (a, b) => panic!(
            "the replication ({:?}) and query ({:?}) connections disagree",
            a.err(),
            b.err()
        ),
    }
}

/// Whether every current connection of `weft` (replication and query)
/// uses TLS, and how many there are.
fn weft_tls_connections(pg: &PgCluster) -> String {
    pg.psql(
        "SELECT count(*) || ' ' || bool_and(s.ssl) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'weft'",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_verifies_the_server_certificate() {
    let ca = TestCa::new("weft test CA");
    let other_ca = TestCa::new("some other CA");
    let mut pg = tls_cluster(&ca, false, vec![]);
    let port = pg.port();
    let root = format!("sslrootcert={}", ca.cert().display());
    let wrong_root = format!("sslrootcert={}", other_ca.cert().display());

    connect_both(&url(
        "localhost",
        port,
        "postgres",
        &format!("sslmode=verify-full&{root}"),
    ))
    .await
    .expect("verify-full with the right CA and host name");

    let e = connect_both(&url(
        "localhost",
        port,
        "postgres",
        &format!("sslmode=verify-full&{wrong_root}"),
    ))
    .await
    .unwrap_err();
    assert!(matches!(e, PgError::Tls { .. }), "{e}");
    assert!(
        e.to_string().contains("not signed by a CA in sslrootcert="),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains(&other_ca.cert().display().to_string()),
        "{e}"
    );

    let e = connect_both(&url(
        "127.0.0.1",
        port,
        "postgres",
        &format!("sslmode=verify-full&{root}"),
    ))
    .await
    .unwrap_err();
    assert!(matches!(e, PgError::Tls { .. }), "{e}");
    assert!(
        e.to_string().contains("not valid for host \"127.0.0.1\"")
            && e.to_string().contains("sslmode=verify-ca"),
        "{e}"
    );

    connect_both(&url(
        "127.0.0.1",
        port,
        "postgres",
        &format!("sslmode=verify-ca&{root}"),
    ))
    .await
    .expect("verify-ca ignores the host name");
    let e = connect_both(&url(
        "127.0.0.1",
        port,
        "postgres",
        &format!("sslmode=verify-ca&{wrong_root}"),
    ))
    .await
    .unwrap_err();
    assert!(e.to_string().contains("not signed by a CA"), "{e}");

    connect_both(&url("127.0.0.1", port, "postgres", "sslmode=require"))
        .await
        .expect("require without a CA encrypts without checking");
    let e = connect_both(&url(
        "127.0.0.1",
        port,
        "postgres",
        &format!("sslmode=require&{wrong_root}"),
    ))
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("not signed by a CA"),
        "require with sslrootcert checks the chain, as libpq: {e}"
    );

    // The whole source over verify-full: changes arrive and both of its
    // connections are encrypted.
    pg.psql("CREATE TABLE t (id int PRIMARY KEY, note text)");
    let config = crate::harness::source::source_config(
        &url(
            "localhost",
            port,
            "postgres",
            &format!("sslmode=verify-full&{root}"),
        ),
        "tls_slot",
        "tls_pub",
        &["public.t"],
    );
    let (tx, mut events) = events::channel(64, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(weft_source::run(config, tx, durable_rx, shutdown.clone()));
    pg.wait_for_active_slot("tls_slot");
    pg.psql("INSERT INTO t VALUES (1, 'over tls')");
    let change = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("a change in time")
            .expect("the source runs");
        if let SourceEvent::Change(change) = event {
            break change;
        }
    };
    assert_eq!(change.record()["note"], "over tls");
    assert_eq!(weft_tls_connections(&pg), "2 true");

    // A restart: the source reconnects over TLS and resumes.
    pg.restart();
    pg.psql("INSERT INTO t VALUES (2, 'after restart')");
    let change = loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("a change after the restart in time")
            .expect("the source runs");
        if let SourceEvent::Change(change) = event
            && change.record()["id"] == 2
        {
            break change;
        }
    };
    assert_eq!(change.record()["note"], "after restart");
    assert_eq!(weft_tls_connections(&pg), "2 true");
    shutdown.cancel();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_connections_to_a_tls_only_server_fail_clearly() {
    let ca = TestCa::new("weft test CA");
    let pg = tls_cluster(&ca, true, vec![]);
    let port = pg.port();

    let e = connect_both(&url("127.0.0.1", port, "postgres", "sslmode=disable"))
        .await
        .unwrap_err();
    assert!(matches!(e, PgError::TlsRequired { .. }), "{e}");
    assert!(e.to_string().contains("accepts only TLS"), "{e}");
    assert!(e.to_string().contains("sslmode=require"), "{e}");

    // run() stops with the same error rather than retrying forever.
    let config = crate::harness::source::source_config(
        &url("127.0.0.1", port, "postgres", "sslmode=disable"),
        "s",
        "p",
        &[],
    );
    let (tx, _events) = events::channel(8, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let e = tokio::time::timeout(
        Duration::from_secs(30),
        weft_source::run(config, tx, durable_rx, CancellationToken::new()),
    )
    .await
    .expect("run gives up at once")
    .unwrap_err();
    assert!(
        matches!(e, SourceError::Postgres(PgError::TlsRequired { .. })),
        "{e}"
    );

    // allow: plain is refused, so it retries with TLS; prefer: TLS first.
    for mode in ["allow", "prefer", "require"] {
        connect_both(&url(
            "127.0.0.1",
            port,
            "postgres",
            &format!("sslmode={mode}"),
        ))
        .await
        .unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_fails_clearly() {
    let pg = PgCluster::start();
    let port = pg.port();
    let e = connect_both(&url("127.0.0.1", port, "postgres", "sslmode=require"))
        .await
        .unwrap_err();
    assert!(matches!(e, PgError::Tls { .. }), "{e}");
    assert!(e.to_string().contains("ssl = on"), "{e}");
    for mode in ["disable", "allow", "prefer"] {
        connect_both(&url(
            "127.0.0.1",
            port,
            "postgres",
            &format!("sslmode={mode}"),
        ))
        .await
        .unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_works_over_tls() {
    let ca = TestCa::new("weft test CA");
    let pg = tls_cluster(
        &ca,
        true,
        vec!["hostssl all alice 127.0.0.1/32 scram-sha-256".into()],
    );
    pg.psql(
        "SET password_encryption = 'scram-sha-256'; \
         CREATE ROLE alice LOGIN REPLICATION PASSWORD 's3cret'",
    );
    let root = format!("sslrootcert={}", ca.cert().display());
    let good = format!(
        "postgres://alice:s3cret@localhost:{}/postgres?sslmode=verify-full&{root}",
        pg.port()
    );
    connect_both(&good).await.expect("SCRAM over verify-full");
    // The server checks the binding data: success proves both connections
    // computed tls-server-end-point correctly.
    connect_both(&format!("{good}&channel_binding=require"))
        .await
        .expect("SCRAM-SHA-256-PLUS with channel binding");
    connect_both(&format!("{good}&channel_binding=disable"))
        .await
        .expect("SCRAM without channel binding");
    // postgres itself authenticates by trust: nothing to bind.
    let trust = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&{root}&channel_binding=require",
        pg.port()
    );
    let e = connect_both(&trust)
        .await
        .expect_err("require without SCRAM");
    assert!(e.to_string().contains("channel_binding=require"), "{e}");
    let e = PgConnectOptions::from_url(&format!(
        "postgres://alice@localhost:{}/postgres?sslmode=disable&channel_binding=require",
        pg.port()
    ))
    .unwrap_err();
    assert!(e.to_string().contains("needs TLS"), "{e}");
    let bad = good.replace("s3cret", "wrong");
    let e = connect_both(&bad)
        .await
        .expect_err("a wrong password fails");
    assert!(
        e.to_string().contains("password authentication failed"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_authenticate_with_sslcert_and_sslkey() {
    let ca = TestCa::new("weft test CA");
    let pg = PgCluster::start_with(PgOptions {
        tls: Some(ServerTls {
            files: ca.issue_server("server", &["DNS:localhost"]),
            tls_only: true,
            client_ca: Some(ca.cert()),
        }),
        hba_rules: vec!["hostssl all carol 127.0.0.1/32 cert".into()],
        ..Default::default()
    });
    pg.psql("CREATE ROLE carol LOGIN REPLICATION");
    let carol = ca.issue_client("carol", "carol");
    let mallory = ca.issue_client("mallory", "mallory");
    let base = format!(
        "postgres://carol@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg.port(),
        ca.cert().display()
    );
    connect_both(&format!(
        "{base}&sslcert={}&sslkey={}",
        carol.cert.display(),
        carol.key.display()
    ))
    .await
    .expect("carol's certificate authenticates carol");

    let e = connect_both(&base)
        .await
        .expect_err("no client certificate");
    assert!(e.to_string().contains("certificate"), "{e}");
    let e = connect_both(&format!(
        "{base}&sslcert={}&sslkey={}",
        mallory.cert.display(),
        mallory.key.display()
    ))
    .await
    .expect_err("another user's certificate");
    assert!(
        e.to_string().contains("certificate authentication failed"),
        "{e}"
    );
    let e = connect_both(&format!(
        "{base}&sslcert=/nonexistent.crt&sslkey=/nonexistent.key"
    ))
    .await
    .expect_err("missing files");
    assert!(e.to_string().contains("/nonexistent.crt"), "{e}");
}
