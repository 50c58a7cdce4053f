//! The OpenAPI document at `/api/openapi.json` covers every route, and a
//! schema-driven fuzz of the API from it (schemathesis, from PyPI) finds no
//! server error: every malformed, oversized or nonsensical request gets a
//! 4xx, and weft keeps serving and streaming afterwards.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::python_tools;
use crate::harness::weft::{WeftProcess, http};

const TOKEN: &str = "fuzz-token-0123456789abcdef";

#[test]
fn the_api_fuzzed_from_its_openapi_document_answers_no_server_error() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let config = format!(
        "{databases}api_tokens:\n  - {{ name: fuzz, token: {TOKEN} }}\n\
         functions:\n  - {{ name: tag, type: transform, file: {tagger}, config: {{ tag: v1 }} }}\n\
         http_endpoints:\n  - {{ name: hook, url: \"http://127.0.0.1:9\" }}\n\
         webhook_sources:\n  - {{ name: inbox, auth: {{ bearer_token: source-secret-0123456789 }} }}\n\
         sinks:\n  - {{ name: items, database: shop, transform: tag, destination: {{ type: sequin_stream }} }}\n\
         \x20 - {{ name: hooks, source: {{ webhook: inbox }}, destination: {{ type: webhook, http_endpoint: hook }} }}\n",
        databases = pg.databases_yaml("weft_fuzz"),
        tagger = guests::wasm("weft_tag_transform").display(),
    );
    let (dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_fuzz", &config);

    let document: Value = http()
        .get(weft.url("/api/openapi.json"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let paths = document["paths"].as_object().expect("paths");
    for route in [
        "/api/sinks",
        "/api/plugins",
        "/api/functions/{name}/shadow",
        "/api/sinks/{name}/dead_letters/{id}/replay",
        "/api/sinks/{name}/backfills/{id}/pause",
        "/api/http_pull_consumers/{name}/receive",
        "/api/config/apply",
        "/health/ready",
    ] {
        assert!(paths.contains_key(route), "{route} is documented");
    }
    assert!(
        paths.len() >= 30,
        "{} paths documented: {:?}",
        paths.len(),
        paths.keys()
    );
    assert!(
        paths["/api/http_pull_consumers/{name}/receive"]
            .as_object()
            .unwrap()
            .contains_key("post"),
        "receive takes GET and POST"
    );

    // Every `{name}` is the pull sink's, so that the sink routes (pause,
    // dead letters, backfills, quarantine...) run their handlers instead of
    // answering 404. Left out: applying a fuzzed config would replace the
    // running one (an empty document is a valid config), and so would
    // replacing or deleting the sink; a fuzzed long poll would outlast the
    // request timeout. schemathesis runs in the test's temporary directory,
    // where it keeps its cache.
    std::fs::write(
        dir.path().join("schemathesis.toml"),
        "[parameters]\n\"path.name\" = \"items\"\n",
    )
    .unwrap();
    let output = Command::new(python_tools::command("schemathesis"))
        .current_dir(dir.path())
        .args([
            "run",
            &weft.url("/api/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {TOKEN}"),
            "--checks",
            "not_a_server_error",
            "--exclude-path-regex",
            "/api/config/apply|/promote|/rollback|^/api/sinks/\\{name\\}$|^/api/functions/\\{name\\}$|^/api/postgres_databases/\\{name\\}$|^/api/destinations/http_endpoints/\\{name\\}$|/receive$",
            "--max-examples",
            "25",
            "--workers",
            "1",
            "--request-timeout",
            "20",
            "--suppress-health-check",
            "all",
        ])
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .expect("run schemathesis");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis found failures:\n{report}"
    );
    eprintln!("{report}");
    for phase in ["✅ Coverage", "✅ Fuzzing"] {
        assert!(report.contains(phase), "{phase} ran:\n{report}");
    }

    // weft still serves and streams (the fuzz may have left the sink
    // paused).
    let resumed = http()
        .post(weft.url("/api/sinks/items/resume"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(resumed.status().as_u16(), 200);
    pg.psql("INSERT INTO items VALUES (1, 'after the fuzz')");
    let got = weft.wait_until("the change after the fuzz", Duration::from_secs(60), || {
        let response: Value = http()
            .get(weft.url("/api/http_pull_consumers/items/receive?batch_size=10&wait_for=1000"))
            .bearer_auth(TOKEN)
            .send()
            .map_err(|e| e.to_string())?
            .json()
            .map_err(|e| e.to_string())?;
        let data = response["data"].as_array().cloned().unwrap_or_default();
        data.into_iter()
            .find(|m| m["data"]["id"] == 1)
            .ok_or(response.to_string())
    });
    assert_eq!(got["data"]["tag"], "v1");
    assert_eq!(weft.terminate(), Some(0));
}
