//! Accounts through the real binary: the isolation matrix. Two accounts
//! share one weft; for every route, a token of account A gets 404 or 403
//! on account B's resources, and neither reads the other's messages.
//! Lists show an account its own resources only, plugin names are per
//! account, and an admin token sees everything.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sha2::Digest;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

const ADMIN: &str = "admin-token-0123456789abcdef";
const TOKEN_A: &str = "account-a-token-0123456789";
const TOKEN_B: &str = "account-b-token-0123456789";

fn send(
    weft: &WeftProcess,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    try_send(weft, &method, path, token, body.as_ref()).expect("a request to weft")
}

/// One request; `Err` when weft does not answer.
fn try_send(
    weft: &WeftProcess,
    method: &Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let mut request = http()
        .request(method.clone(), weft.url(path))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.json().unwrap_or(Value::Null)))
}

fn names(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn database(pg: &PgCluster, name: &str, account: &str, slot: &str) -> String {
    format!(
        "  - {{ name: {name}, account: {account}, hostname: 127.0.0.1, port: {port}, database: postgres, username: postgres, slot: {{ name: {slot}, create_if_not_exists: true }}, publication: {{ name: {slot}, create_if_not_exists: true }} }}\n",
        port = pg.port()
    )
}

#[test]
fn an_account_token_never_reaches_another_accounts_resources_or_messages() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let tagger = guests::wasm("weft_tag_transform");
    let config = format!(
        "accounts:\n  - {{ name: a, limits: {{ max_sinks: 2 }} }}\n  - {{ name: b }}\n\
         api_tokens:\n  - {{ name: admin, token: {ADMIN} }}\n  - {{ name: ta, token: {TOKEN_A}, account: a }}\n  - {{ name: tb, token: {TOKEN_B}, account: b }}\n\
         databases:\n{}{}  - {{ name: ghost, url: \"postgres://postgres@127.0.0.1:{port}/nope\", slot: {{ name: ghost }}, publication: {{ name: ghost }} }}\n\
         functions:\n  - {{ name: fa, account: a, type: transform, file: {t}, config: {{ tag: a }} }}\n  - {{ name: fb, account: b, type: transform, file: {t}, config: {{ tag: b }} }}\n\
         http_endpoints:\n  - {{ name: hb, account: b, url: \"http://127.0.0.1:9\" }}\n\
         sinks:\n  - {{ name: sink-a, account: a, database: shop-a, transform: fa, destination: {{ type: sequin_stream }} }}\n\
         \x20 - {{ name: sink-b, account: b, database: shop-b, transform: fb, destination: {{ type: sequin_stream }} }}\n",
        database(&pg, "shop-a", "a", "weft_acct_a"),
        database(&pg, "shop-b", "b", "weft_acct_b"),
        t = tagger.display(),
        port = pg.port(),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_acct_a", &config);
    pg.wait_for_active_slot("weft_acct_b");

    // Each account registers its own `tagger@1.0.0`: one name space each.
    let bytes = std::fs::read(&tagger).unwrap();
    for token in [TOKEN_A, TOKEN_B] {
        let response = http()
            .post(weft.url("/api/plugins"))
            .query(&[
                ("name", "tagger"),
                ("version", "1.0.0"),
                ("kind", "transform"),
            ])
            .bearer_auth(token)
            .body(bytes.clone())
            .send()
            .unwrap();
        assert_eq!(
            response.status().as_u16(),
            201,
            "{}",
            response.text().unwrap()
        );
    }
    pg.psql("INSERT INTO items SELECT g, 'x' FROM generate_series(1, 5) g");
    let b_before = weft.wait_until("B's messages", Duration::from_secs(60), || {
        let (_, body) = send(
            &weft,
            Method::GET,
            "/api/http_pull_consumers/sink-b/receive?batch_size=10&wait_for=500",
            TOKEN_B,
            None,
        );
        let data = body["data"].as_array().cloned().unwrap_or_default();
        (data.len() == 5).then_some(data).ok_or(body)
    });
    assert!(b_before.iter().all(|m| m["data"]["tag"] == "b"));
    let b_ack_id = b_before[0]["ack_id"].as_str().unwrap().to_string();

    // The matrix: every route, with B's names, as A.
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, "/api/sinks/sink-b".into(), None),
        (Method::POST, "/api/sinks/sink-b/pause".into(), None),
        (Method::POST, "/api/sinks/sink-b/resume".into(), None),
        (Method::GET, "/api/sinks/sink-b/quarantine".into(), None),
        (Method::DELETE, "/api/sinks/sink-b/quarantine".into(), None),
        (Method::GET, "/api/sinks/sink-b/dead_letters".into(), None),
        (
            Method::POST,
            "/api/sinks/sink-b/dead_letters/replay".into(),
            None,
        ),
        (Method::GET, "/api/sinks/sink-b/dead_letters/1".into(), None),
        (
            Method::DELETE,
            "/api/sinks/sink-b/dead_letters/1".into(),
            None,
        ),
        (
            Method::POST,
            "/api/sinks/sink-b/dead_letters/1/replay".into(),
            None,
        ),
        (Method::GET, "/api/sinks/sink-b/backfills".into(), None),
        (
            Method::POST,
            "/api/sinks/sink-b/backfills".into(),
            Some(json!({"table": "public.items"})),
        ),
        (Method::GET, "/api/sinks/sink-b/backfills/x".into(), None),
        (Method::DELETE, "/api/sinks/sink-b/backfills/x".into(), None),
        (
            Method::POST,
            "/api/sinks/sink-b/backfills/x/pause".into(),
            None,
        ),
        (
            Method::POST,
            "/api/sinks/sink-b/backfills/x/resume".into(),
            None,
        ),
        (
            Method::GET,
            "/api/http_pull_consumers/sink-b/receive".into(),
            None,
        ),
        (
            Method::POST,
            "/api/http_pull_consumers/sink-b/receive".into(),
            None,
        ),
        (
            Method::POST,
            "/api/http_pull_consumers/sink-b/ack".into(),
            Some(json!({"ack_ids": [b_ack_id]})),
        ),
        (
            Method::POST,
            "/api/http_pull_consumers/sink-b/nack".into(),
            Some(json!({"ack_ids": [b_ack_id]})),
        ),
        (
            Method::GET,
            "/api/sequin_streams/sink-b/receive".into(),
            None,
        ),
        (
            Method::POST,
            "/api/sequin_streams/sink-b/ack".into(),
            Some(json!({"ack_ids": [b_ack_id]})),
        ),
        (Method::GET, "/api/functions/fb".into(), None),
        (Method::GET, "/api/functions/fb/shadow".into(), None),
        (
            Method::POST,
            "/api/functions/fb/shadow".into(),
            Some(json!({"plugin": "tagger@1.0.0"})),
        ),
        (Method::DELETE, "/api/functions/fb/shadow".into(), None),
        (Method::POST, "/api/functions/fb/promote".into(), None),
        (Method::POST, "/api/functions/fb/rollback".into(), None),
        (Method::GET, "/api/postgres_databases/shop-b".into(), None),
        (
            Method::PUT,
            "/api/postgres_databases/shop-b".into(),
            Some(json!({"name": "shop-b", "url": "postgres://127.0.0.1:9/x"})),
        ),
        (
            Method::DELETE,
            "/api/postgres_databases/shop-b".into(),
            None,
        ),
        (
            Method::PUT,
            "/api/destinations/http_endpoints/hb".into(),
            Some(json!({"name": "hb", "url": "http://127.0.0.1:9"})),
        ),
        (
            Method::DELETE,
            "/api/destinations/http_endpoints/hb".into(),
            None,
        ),
        (
            Method::POST,
            "/api/postgres_databases/shop-b/test_connection".into(),
            None,
        ),
        (
            Method::GET,
            "/api/destinations/http_endpoints/hb".into(),
            None,
        ),
        (Method::DELETE, "/api/api_tokens/tb".into(), None),
        (Method::GET, "/api/accounts/b".into(), None),
        (Method::GET, "/api/config/export".into(), None),
        (
            Method::POST,
            "/api/config/plan".into(),
            Some(json!({"yaml": ""})),
        ),
        (
            Method::POST,
            "/api/config/apply".into(),
            Some(json!({"yaml": ""})),
        ),
        (Method::GET, "/api/health".into(), None),
        (Method::GET, "/metrics".into(), None),
        (Method::GET, "/api/change_retentions".into(), None),
    ];
    for (method, path, body) in &routes {
        let (status, answer) = send(&weft, method.clone(), path, TOKEN_A, body.clone());
        assert!(
            status == 404 || status == 403,
            "{method} {path} as account a answered {status}: {answer}"
        );
        assert!(answer["summary"].is_string(), "{method} {path}: {answer}");
    }
    // B's plugin is out of A's reach: A's own tagger is what A gets.
    let (_, a_plugin) = send(
        &weft,
        Method::GET,
        "/api/plugins/tagger/1.0.0",
        TOKEN_A,
        None,
    );
    assert_eq!(a_plugin["account"], "a", "{a_plugin}");
    let (status, _) = send(
        &weft,
        Method::DELETE,
        "/api/plugins/tagger/1.0.0",
        TOKEN_A,
        None,
    );
    assert_eq!(status, 200);
    let (_, b_plugin) = send(
        &weft,
        Method::GET,
        "/api/plugins/tagger/1.0.0",
        TOKEN_B,
        None,
    );
    assert_eq!(
        b_plugin["account"], "b",
        "A's delete left B's version alone: {b_plugin}"
    );
    // An admin reaches an account's name space with ?account=; an account
    // token cannot name another.
    let (status, by_admin) = send(
        &weft,
        Method::GET,
        "/api/plugins/tagger/1.0.0?account=b",
        ADMIN,
        None,
    );
    assert_eq!(
        (status, &by_admin["account"]),
        (200, &json!("b")),
        "{by_admin}"
    );
    assert_eq!(
        send(
            &weft,
            Method::GET,
            "/api/plugins/tagger/1.0.0?account=b",
            TOKEN_A,
            None
        )
        .0,
        403
    );

    // test_connection, as B on its own database and as the admin on one
    // that does not exist on the server.
    let (status, tested) = send(
        &weft,
        Method::POST,
        "/api/postgres_databases/shop-b/test_connection",
        TOKEN_B,
        None,
    );
    assert_eq!(
        (status, &tested["success"]),
        (200, &json!(true)),
        "{tested}"
    );
    assert!(
        tested["checks"].to_string().contains("replication slot"),
        "{tested}"
    );
    let (_, ghost) = send(
        &weft,
        Method::POST,
        "/api/postgres_databases/ghost/test_connection",
        ADMIN,
        None,
    );
    assert_eq!(ghost["success"], false, "{ghost}");
    assert!(
        ghost["reason"].as_str().unwrap().contains("nope"),
        "{ghost}"
    );

    // Lists hold one's own resources only; the admin sees all.
    let list = |path: &str, token: &str| names(&send(&weft, Method::GET, path, token, None).1);
    assert_eq!(list("/api/sinks", TOKEN_A), ["sink-a"]);
    assert_eq!(list("/api/sinks", TOKEN_B), ["sink-b"]);
    assert_eq!(list("/api/sinks", ADMIN), ["sink-a", "sink-b"]);
    assert_eq!(list("/api/functions", TOKEN_A), ["fa"]);
    assert_eq!(list("/api/postgres_databases", TOKEN_A), ["shop-a"]);
    assert_eq!(
        list("/api/postgres_databases", ADMIN),
        ["shop-a", "shop-b", "ghost"]
    );
    assert!(list("/api/destinations/http_endpoints", TOKEN_A).is_empty());
    assert_eq!(list("/api/plugins", TOKEN_A), Vec::<String>::new());
    assert_eq!(
        list("/api/plugins", ADMIN),
        ["tagger"],
        "B's version is left"
    );
    assert_eq!(list("/api/accounts", TOKEN_A), ["a"]);
    assert_eq!(list("/api/accounts", ADMIN), ["a", "b"]);
    let (_, account_a) = send(&weft, Method::GET, "/api/accounts/a", TOKEN_A, None);
    assert_eq!(account_a["limits"]["max_sinks"], 2, "{account_a}");
    assert_eq!(
        account_a["usage"],
        json!({"sinks": 1, "functions": 1, "plugin_instances": 1, "plugin_versions": 0}),
        "A's plugin was deleted above: {account_a}"
    );

    // Nothing A did reached B: B's sink is active, its lease intact, and
    // A reads only A's messages.
    assert_eq!(
        send(&weft, Method::GET, "/api/sinks/sink-b", TOKEN_B, None).1["status"],
        "active"
    );
    let (status, acked) = send(
        &weft,
        Method::POST,
        "/api/http_pull_consumers/sink-b/ack",
        TOKEN_B,
        Some(json!({"ack_ids": b_before.iter().map(|m| m["ack_id"].clone()).collect::<Vec<_>>()})),
    );
    assert_eq!(status, 200, "{acked}");
    let a_got = weft.wait_until("A's messages", Duration::from_secs(60), || {
        let (_, body) = send(
            &weft,
            Method::GET,
            "/api/http_pull_consumers/sink-a/receive?batch_size=10&wait_for=500",
            TOKEN_A,
            None,
        );
        let data = body["data"].as_array().cloned().unwrap_or_default();
        (data.len() == 5).then_some(data).ok_or(body)
    });
    assert!(a_got.iter().all(|m| m["data"]["tag"] == "a"), "{a_got:?}");
    assert_eq!(weft.terminate(), Some(0));
}

/// Sends until weft answers (it restarts its pipelines on some applies).
fn call(
    weft: &WeftProcess,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    weft.wait_until("an answer", Duration::from_secs(60), || {
        try_send(weft, &method, path, token, body.as_ref())
    })
}

#[test]
fn an_account_creates_changes_and_deletes_its_own_sinks_and_functions_through_the_api() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let config = format!(
        "accounts:\n  - {{ name: a }}\n  - {{ name: b }}\n\
         api_tokens:\n  - {{ name: ta, token: {TOKEN_A}, account: a }}\n  - {{ name: tb, token: {TOKEN_B}, account: b }}\n\
         databases:\n{}{}",
        database(&pg, "shop-a", "a", "weft_crud_a"),
        database(&pg, "shop-b", "b", "weft_crud_b"),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config);
    let as_a =
        |method: Method, path: &str, body: Option<Value>| call(&weft, method, path, TOKEN_A, body);
    let bytes = std::fs::read(guests::wasm("weft_tag_transform")).unwrap();
    for version in ["1.0.0", "2.0.0"] {
        let response = http()
            .post(weft.url("/api/plugins"))
            .query(&[
                ("name", "tagger"),
                ("version", version),
                ("kind", "transform"),
            ])
            .bearer_auth(TOKEN_A)
            .body(bytes.clone())
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
    }

    let (status, body) = as_a(
        Method::POST,
        "/api/functions",
        Some(json!({"name": "fa", "type": "transform", "file": "/etc/passwd"})),
    );
    assert_eq!(
        status, 403,
        "an account names plugins, not host files: {body}"
    );
    let function = |version: &str, tag: &str| json!({"name": "fa", "type": "transform", "plugin": format!("tagger@{version}"), "config": {"tag": tag}});
    let (status, body) = as_a(
        Method::POST,
        "/api/functions",
        Some(function("1.0.0", "one")),
    );
    assert_eq!(status, 201, "{body}");
    let sink = |database: &str| json!({"name": "sa", "database": database, "transform": "fa", "destination": {"type": "sequin_stream"}});
    let (status, body) = as_a(Method::POST, "/api/sinks", Some(sink("shop-b")));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("may only use its own account's resources"),
        "{body}"
    );
    let (status, body) = as_a(Method::POST, "/api/sinks", Some(sink("shop-a")));
    assert_eq!(
        (status, &body["apply"]["restarted"]),
        (201, &json!(false)),
        "the first sink of shop-a starts its feed alone: {body}"
    );
    assert_eq!(body["apply"]["databases"]["started"], json!(["shop-a"]));
    let (status, _) = as_a(Method::POST, "/api/sinks", Some(sink("shop-a")));
    assert_eq!(status, 409, "one sink per name");
    let (_, shown) = as_a(Method::GET, "/api/sinks/sa", None);
    assert_eq!(shown["account"], "a", "{shown}");
    pg.wait_for_active_slot("weft_crud_a");

    let receive = |id: i64| {
        weft.wait_until("the row", Duration::from_secs(60), || {
            let (_, body) = as_a(
                Method::GET,
                "/api/http_pull_consumers/sa/receive?batch_size=10&wait_for=500",
                None,
            );
            let data = body["data"].as_array().cloned().unwrap_or_default();
            data.into_iter()
                .find(|m| m["data"]["id"] == id)
                .map(|m| m["data"]["tag"].clone())
                .ok_or(body)
        })
    };
    pg.psql("INSERT INTO items VALUES (1, 'x')");
    assert_eq!(receive(1), "one");
    let (status, body) = as_a(
        Method::PUT,
        "/api/functions/fa",
        Some(function("2.0.0", "two")),
    );
    assert_eq!(
        (status, &body["apply"]["restarted"]),
        (200, &json!(false)),
        "a hot swap: {body}"
    );
    pg.psql("INSERT INTO items VALUES (2, 'x')");
    assert_eq!(receive(2), "two");

    assert_eq!(
        call(
            &weft,
            Method::PUT,
            "/api/sinks/sa",
            TOKEN_B,
            Some(sink("shop-b"))
        )
        .0,
        404
    );
    assert_eq!(
        call(&weft, Method::DELETE, "/api/functions/fa", TOKEN_B, None).0,
        404
    );
    let (status, body) = as_a(Method::DELETE, "/api/functions/fa", None);
    assert_eq!(status, 400, "a function a sink uses stays: {body}");
    let (status, body) = as_a(Method::DELETE, "/api/sinks/sa", None);
    assert_eq!((status, &body["deleted"]), (200, &json!(true)), "{body}");
    assert_eq!(
        names(&as_a(Method::GET, "/api/sinks", None).1),
        Vec::<String>::new()
    );
    // Tokens: A mints one for itself, uses it, and revokes it; B cannot.
    let (status, minted) = as_a(
        Method::POST,
        "/api/api_tokens",
        Some(json!({"name": "a-ci"})),
    );
    assert_eq!((status, &minted["account"]), (201, &json!("a")), "{minted}");
    let secret = minted["token"].as_str().unwrap().to_string();
    assert_eq!(call(&weft, Method::GET, "/api/sinks", &secret, None).0, 200);
    let written = std::fs::read_to_string(dir.path().join("weft.yml")).unwrap();
    let sha256 = hex::encode(sha2::Sha256::digest(secret.as_bytes()));
    assert!(
        !written.contains(&secret) && written.contains(&format!("token_sha256: {sha256}")),
        "the config file keeps only the minted token's hash: {written}"
    );
    let (_, tokens) = as_a(Method::GET, "/api/api_tokens", None);
    assert_eq!(names(&tokens), ["ta", "a-ci"], "{tokens}");
    assert!(
        !tokens.to_string().contains(&secret),
        "secrets are never listed"
    );
    assert_eq!(
        call(&weft, Method::DELETE, "/api/api_tokens/a-ci", TOKEN_B, None).0,
        404
    );
    assert_eq!(
        as_a(Method::DELETE, "/api/api_tokens/ta", None).0,
        409,
        "not one's own token"
    );
    assert_eq!(as_a(Method::DELETE, "/api/api_tokens/a-ci", None).0, 200);
    assert_eq!(
        call(&weft, Method::GET, "/api/sinks", &secret, None).0,
        401,
        "revoked at once"
    );

    let written = std::fs::read_to_string(dir.path().join("weft.yml")).unwrap();
    assert!(
        written.contains("tagger@2.0.0") && !written.contains("name: sa"),
        "{written}"
    );
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn an_admin_token_manages_accounts_without_a_restart_and_an_account_token_cannot() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let config = format!(
        "accounts:\n  - {{ name: a }}\n\
         api_tokens:\n  - {{ name: admin, token: {ADMIN} }}\n  - {{ name: ta, token: {TOKEN_A}, account: a }}\n\
         databases:\n{}\
         sinks:\n  - {{ name: sa, account: a, database: shop-a, source: {{ include_tables: [public.items] }}, destination: {{ type: sequin_stream }} }}\n",
        database(&pg, "shop-a", "a", "weft_accounts_admin"),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_accounts_admin", &config);
    let slot_backend = || {
        pg.psql(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'weft_accounts_admin'",
        )
    };
    let backend = slot_backend();

    let (status, body) = send(
        &weft,
        Method::POST,
        "/api/accounts",
        TOKEN_A,
        Some(json!({"name": "c"})),
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = send(
        &weft,
        Method::PUT,
        "/api/accounts/a",
        TOKEN_A,
        Some(json!({"name": "a", "limits": {"max_sinks": 100}})),
    );
    assert_eq!(
        status, 403,
        "an account cannot raise its own limits: {body}"
    );
    assert_eq!(
        send(&weft, Method::DELETE, "/api/accounts/a", TOKEN_A, None).0,
        403
    );

    let (status, created) = send(
        &weft,
        Method::POST,
        "/api/accounts",
        ADMIN,
        Some(json!({"name": "c", "limits": {"max_sinks": 1}})),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["apply"]["restarted"], false, "{created}");
    let (_, shown) = send(&weft, Method::GET, "/api/accounts/c", ADMIN, None);
    assert_eq!(shown["limits"]["max_sinks"], 1, "{shown}");

    let (status, refused) = send(
        &weft,
        Method::PUT,
        "/api/accounts/a",
        ADMIN,
        Some(json!({"name": "a", "limits": {"max_sinks": 0}})),
    );
    assert_eq!(status, 400, "a limit below what it uses: {refused}");
    let (status, refused) = send(&weft, Method::DELETE, "/api/accounts/a", ADMIN, None);
    assert_eq!(status, 400, "a owns a sink and a token: {refused}");
    let (status, deleted) = send(&weft, Method::DELETE, "/api/accounts/c", ADMIN, None);
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        send(&weft, Method::GET, "/api/accounts/c", ADMIN, None).0,
        404
    );

    pg.psql("INSERT INTO items VALUES (1, 'x')");
    let got = weft.wait_until("the row", Duration::from_secs(60), || {
        let (_, body) = send(
            &weft,
            Method::GET,
            "/api/http_pull_consumers/sa/receive?batch_size=10&wait_for=500",
            TOKEN_A,
            None,
        );
        let data = body["data"].as_array().cloned().unwrap_or_default();
        (!data.is_empty()).then_some(data).ok_or(body)
    });
    assert_eq!(got[0]["data"]["record"]["id"], 1, "{got:?}");
    assert_eq!(
        slot_backend(),
        backend,
        "no account change restarted anything"
    );
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn an_accounts_resources_connect_only_to_its_allowed_hosts() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let config = format!(
        "accounts:\n  - {{ name: a, allow_hosts: [127.0.0.1] }}\n\
         api_tokens:\n  - {{ name: admin, token: {ADMIN} }}\n  - {{ name: ta, token: {TOKEN_A}, account: a }}\n\
         databases:\n{}",
        database(&pg, "shop-a", "a", "weft_accounts_hosts"),
    );
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config);
    let redis_sink = |host: &str| {
        json!({"name": "cache", "database": "shop-a",
               "source": {"include_tables": ["public.items"]},
               "destination": {"type": "redis_string", "host": host, "port": 6379}})
    };

    // `localhost` reaches the same server, but it is not what the operator
    // listed: names are compared, not resolved.
    let (status, body) = send(
        &weft,
        Method::POST,
        "/api/sinks",
        TOKEN_A,
        Some(redis_sink("localhost")),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("`localhost:6379` is not in account \\\"a\\\"'s allow_hosts"),
        "{body}"
    );
    let (status, body) = send(
        &weft,
        Method::POST,
        "/api/sinks",
        TOKEN_A,
        Some(redis_sink("127.0.0.1")),
    );
    assert_eq!(status, 201, "{body}");

    let (_, shown) = send(&weft, Method::GET, "/api/accounts/a", TOKEN_A, None);
    assert_eq!(shown["allow_hosts"], json!(["127.0.0.1"]), "{shown}");
    // Narrowing the list below what the account already uses is refused.
    let (status, refused) = send(
        &weft,
        Method::PUT,
        "/api/accounts/a",
        ADMIN,
        Some(json!({"name": "a", "allow_hosts": ["db.acme.internal"]})),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("databases[0]")
            && refused.to_string().contains("sinks[0].destination.host"),
        "{refused}"
    );
}

/// A CPU share set on a running weft holds from the apply on: the
/// account's functions load anew with it (a hot swap, no restart), so a
/// guest that spins to its timeout makes the account's next call wait.
#[test]
fn a_cpu_share_set_through_config_apply_throttles_the_accounts_running_functions() {
    let pg = PgCluster::start();
    pg.psql(r#"CREATE TABLE items (id int PRIMARY KEY, "do" text)"#);
    let config = |account_limits: &str| {
        format!(
            "accounts:\n  - {{ name: a{account_limits} }}\n\
             databases:\n{}\
             functions:\n  - {{ name: spin, account: a, type: transform, file: {}, limits: {{ timeout_ms: 1000 }} }}\n\
             sinks:\n  - {{ name: sa, account: a, database: shop-a, transform: spin, quarantine_after_traps: 0, source: {{ include_tables: [public.items] }}, destination: {{ type: sequin_stream }} }}\n",
            database(&pg, "shop-a", "a", "weft_cpu_share"),
            guests::wasm("weft_hostile_transform").display(),
        )
    };
    let waited = |weft: &WeftProcess| {
        weft.metric(
            "weft_account_cpu_wait_milliseconds_total",
            &[("account", "a")],
        )
        .unwrap_or(0.0)
    };
    // A change the guest spins on until its timeout (a second of
    // CPU), then one it echoes, each in its own transaction.
    let spin_then_echo = |weft: &WeftProcess, id: i32| {
        pg.psql(&format!("INSERT INTO items VALUES ({id}, 'loop')"));
        pg.psql(&format!("INSERT INTO items VALUES ({}, 'echo')", id + 1));
        let got = weft.drain("sa", 1, Duration::from_secs(60));
        assert_eq!(got.len(), 1, "the echoed change: {}", weft.log_text());
        assert_eq!(got[0]["id"], id + 1, "the guest echoes the record: {got:?}");
    };
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_cpu_share", &config(""));

    spin_then_echo(&weft, 1);
    assert_eq!(waited(&weft), 0.0, "no share, no wait");

    let (status, applied) = weft.apply_config(&config(", limits: { plugin_cpu_percent: 10 }"));
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["restarted"], false, "{applied}");
    assert_eq!(
        applied["hot_swapped"]["functions"],
        json!(["spin"]),
        "the account's function loads anew with its share: {applied}"
    );

    // Up to a second of guest CPU (less when the machine is busy: the
    // timeout counts wall time) at a tenth of a core, beyond the 100 ms
    // burst: the echo's call waits for the account's share.
    spin_then_echo(&weft, 3);
    weft.wait_until("the account's CPU wait", Duration::from_secs(30), || {
        let wait = waited(&weft);
        (wait > 0.0).then_some(wait).ok_or(wait)
    });
    assert_eq!(weft.terminate(), Some(0));
}
