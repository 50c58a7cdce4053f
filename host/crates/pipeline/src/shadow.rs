//! Canary (shadow) runs of a transform: a candidate version runs on the
//! same changes as the live one, after it, and its payloads are compared
//! with the live payloads. What the sink delivers is always the live
//! version's output; a candidate that fails or traps only counts as
//! `failed`. The report (counts and the first differing messages) tells
//! whether the candidate is safe to promote (see [`crate::hot_swap`]).

use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use weft_core::message::Message;
use weft_wasm::{Payload, TransformFunction};

/// How many differing messages a report keeps.
pub const MAX_SAMPLES: usize = 20;

/// One message whose candidate payload differs from the live one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffSample {
    /// The message's idempotency key.
    pub idempotency_key: String,
    /// Its primary key values.
    pub record_pks: Vec<String>,
    /// The live payload (JSON, or `{"content_type", "data_base64"}`).
    pub live: serde_json::Value,
    /// The candidate's payload, or its error.
    pub shadow: serde_json::Value,
}

/// How a candidate compares with the live version so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ShadowReport {
    /// What runs in shadow: the plugin (name@version) or component file.
    pub candidate: String,
    /// Messages both versions processed.
    pub compared: u64,
    /// Of those, the ones whose payloads differ (failures included).
    pub differing: u64,
    /// Of those, the ones the candidate failed on.
    pub failed: u64,
    /// The first [`MAX_SAMPLES`] differing messages.
    pub samples: Vec<DiffSample>,
}

/// A candidate transform and its report. Cheap to clone; clones share both.
#[derive(Clone)]
pub struct Shadow {
    inner: Arc<Mutex<ShadowState>>,
}

struct ShadowState {
    transform: TransformFunction,
    report: ShadowReport,
}

impl Shadow {
    /// Runs `transform` (described as `candidate`) in shadow.
    pub fn new(candidate: &str, transform: TransformFunction) -> Self {
        Shadow {
            inner: Arc::new(Mutex::new(ShadowState {
                transform,
                report: ShadowReport {
                    candidate: candidate.to_string(),
                    ..ShadowReport::default()
                },
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, ShadowState> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The report so far.
    pub fn report(&self) -> ShadowReport {
        self.state().report.clone()
    }

    /// Runs the candidate on `messages` (the live transform's inputs) and
    /// compares its payloads with `live`, index-aligned. Blocks.
    pub fn compare(&self, messages: &[Message], live: &[&Payload]) {
        if messages.is_empty() {
            return;
        }
        let mut state = self.state();
        let outcomes: Vec<Result<Payload, String>> = match state.transform.transform(messages) {
            Ok(results) => results
                .into_iter()
                .map(|result| result.map_err(|e| e.to_string()))
                .collect(),
            Err(whole) => vec![Err(whole.to_string()); messages.len()],
        };
        let report = &mut state.report;
        for ((message, live), candidate) in messages.iter().zip(live).zip(outcomes) {
            report.compared += 1;
            let same = matches!(&candidate, Ok(payload) if payload == *live);
            if same {
                continue;
            }
            report.differing += 1;
            if candidate.is_err() {
                report.failed += 1;
            }
            if report.samples.len() < MAX_SAMPLES {
                report.samples.push(DiffSample {
                    idempotency_key: message.metadata.idempotency_key.clone(),
                    record_pks: message.metadata.record_pks.clone(),
                    live: shown(live),
                    shadow: match &candidate {
                        Ok(payload) => shown(payload),
                        Err(error) => serde_json::json!({ "error": error }),
                    },
                });
            }
        }
    }
}

/// A payload as a report shows it (see [`Payload::into_json_view`]).
fn shown(payload: &Payload) -> serde_json::Value {
    payload.clone().into_json_view()
}
