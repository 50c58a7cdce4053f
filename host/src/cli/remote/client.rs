//! A weft server as the CLI reaches it: base URL and token, resolved from
//! flags (`--url`, `--token`, or `WEFT_URL`, `WEFT_TOKEN`), else the named
//! or selected context, else `http://127.0.0.1:7376`; and requests whose
//! errors carry the API's `summary` and `validation_errors`.

use std::time::Duration;

use serde_json::Value;

use super::contexts::Contexts;

/// The default API address (`weft run`'s `--listen`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:7376";

/// Where and as whom to call.
#[derive(Debug, Clone)]
pub struct Remote {
    url: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    /// The server for these flags (see the module doc).
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        context: Option<&str>,
    ) -> Result<Remote, String> {
        let contexts = Contexts::load()?;
        let saved = contexts.get(context)?.cloned();
        let url = url
            .or_else(|| saved.as_ref().map(|c| c.url.clone()))
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let token = token.or_else(|| saved.and_then(|c| c.token));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Remote {
            url: url.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, String> {
        self.send(self.http.get(self.at(path))).await
    }

    /// `POST path` with a JSON body (or none).
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut request = self.http.post(self.at(path));
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        self.send(request).await
    }

    /// `POST path?query` with `bytes` as a WebAssembly body.
    pub async fn post_wasm(
        &self,
        path: &str,
        query: &[(&str, &str)],
        bytes: Vec<u8>,
    ) -> Result<Value, String> {
        let request = self
            .http
            .post(self.at(path))
            .query(query)
            .header(reqwest::header::CONTENT_TYPE, "application/wasm")
            .body(bytes);
        self.send(request).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<Value, String> {
        self.send(self.http.delete(self.at(path))).await
    }

    fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, String> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach weft at {}: {e}", self.url))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| format!("weft at {} answered {status} without a body: {e}", self.url))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            Ok(body)
        } else {
            Err(describe_error(status.as_u16(), &body))
        }
    }
}

/// An API error as one message: the summary, then each validation error.
fn describe_error(status: u16, body: &Value) -> String {
    let summary = body["summary"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string());
    let mut text = format!("weft answered {status}: {summary}");
    if let Some(errors) = body["validation_errors"].as_object() {
        for (field, problems) in errors {
            for problem in problems.as_array().into_iter().flatten() {
                text.push_str(&format!(
                    "\n  {field}: {}",
                    problem.as_str().unwrap_or_default()
                ));
            }
        }
    }
    if status == 401 {
        text.push_str("\n  (pass --token, set WEFT_TOKEN, or save it with `weft context add NAME --url URL --token TOKEN`)");
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn errors_list_the_summary_and_each_problem() {
        let text = describe_error(
            400,
            &json!({"summary": "the config is not valid", "validation_errors": {"sinks[0].database": ["no database named \"x\""]}}),
        );
        assert_eq!(
            text,
            "weft answered 400: the config is not valid\n  sinks[0].database: no database named \"x\""
        );
        assert!(describe_error(401, &json!({"summary": "missing API token"})).contains("--token"));
    }
}
