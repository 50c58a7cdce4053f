//! The WASI context a guest runs in: no ambient capabilities.
//!
//! Granted: wall and monotonic clocks, random bytes, and stdout/stderr, which
//! go to `tracing` (target `weft::plugins::guest`) tagged with the plugin's
//! name, line by line and rate-limited. Denied: files (no preopened
//! directories), environment variables, arguments, stdin (empty), sockets and
//! name lookup. Capabilities a user grants to enrichment functions are WIT
//! imports of their own, not WASI: see `source_query` and `outbound_http`.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use super::deterministic::DeterministicInputs;

/// Lines a guest may log in a burst before rate limiting starts.
const LOG_BURST_LINES: f64 = 100.0;
/// Lines per second a guest may log once its burst is spent.
const LOG_LINES_PER_SECOND: f64 = 20.0;
/// Longest line logged; longer output is split.
const MAX_LINE_BYTES: usize = 4096;
/// How much recent stderr is kept to explain a trap.
const STDERR_TAIL_BYTES: usize = 2048;

/// Builds the WASI context for one instance, writing to `stdout` and
/// `stderr`; with `deterministic`, clocks and random bytes come from it.
pub(crate) fn wasi_context(
    stdout: &GuestOutput,
    stderr: &GuestOutput,
    deterministic: Option<&DeterministicInputs>,
) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    if let Some(inputs) = deterministic {
        builder
            .wall_clock(inputs.wall_clock())
            .monotonic_clock(inputs.monotonic_clock())
            .secure_random(inputs.random())
            .insecure_random(inputs.random())
            .insecure_random_seed(0);
    }
    builder
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_ip_name_lookup(false)
        .allow_tcp(false)
        .allow_udp(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    builder.build()
}

/// Which guest stream a [`GuestOutput`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// A guest output stream that logs complete lines through `tracing`.
#[derive(Clone)]
pub(crate) struct GuestOutput {
    state: Arc<Mutex<OutputState>>,
}

struct OutputState {
    plugin: Arc<str>,
    stream: Stream,
    line: Vec<u8>,
    tail: VecDeque<u8>,
    budget: f64,
    refilled_at: Instant,
    suppressed: u64,
}

impl GuestOutput {
    pub(crate) fn new(plugin: Arc<str>, stream: Stream) -> Self {
        GuestOutput {
            state: Arc::new(Mutex::new(OutputState {
                plugin,
                stream,
                line: Vec::new(),
                tail: VecDeque::new(),
                budget: LOG_BURST_LINES,
                refilled_at: Instant::now(),
                suppressed: 0,
            })),
        }
    }

    /// Forgets the recent output kept for trap messages.
    pub(crate) fn clear_tail(&self) {
        let mut state = self.lock();
        state.tail.clear();
    }

    /// The recent output (including an unfinished line), if any.
    pub(crate) fn tail(&self) -> Option<String> {
        let state = self.lock();
        let mut bytes: Vec<u8> = state.tail.iter().copied().collect();
        bytes.extend_from_slice(&state.line);
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        (!text.is_empty()).then_some(text)
    }

    fn write_bytes(&self, bytes: &[u8]) {
        self.lock().write(bytes);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutputState> {
        // A panic while holding this lock leaves plain bytes behind: usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl OutputState {
    fn write(&mut self, bytes: &[u8]) {
        if self.stream == Stream::Stderr {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(STDERR_TAIL_BYTES);
            self.tail.drain(..excess);
        }
        for &byte in bytes {
            if byte == b'\n' {
                self.emit_line();
            } else {
                self.line.push(byte);
                if self.line.len() >= MAX_LINE_BYTES {
                    self.emit_line();
                }
            }
        }
    }

    fn emit_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled_at).as_secs_f64();
        self.refilled_at = now;
        self.budget = (self.budget + elapsed * LOG_LINES_PER_SECOND).min(LOG_BURST_LINES);
        if self.budget < 1.0 {
            self.suppressed += 1;
            return;
        }
        self.budget -= 1.0;
        let plugin = &*self.plugin;
        if self.suppressed > 0 {
            tracing::warn!(target: "weft::plugins::guest", plugin, suppressed = self.suppressed,
                "guest output rate-limited: {} lines dropped", self.suppressed);
            self.suppressed = 0;
        }
        let text = String::from_utf8_lossy(&line);
        match self.stream {
            Stream::Stdout => {
                tracing::info!(target: "weft::plugins::guest", plugin, stream = "stdout", "{text}")
            }
            Stream::Stderr => {
                tracing::warn!(target: "weft::plugins::guest", plugin, stream = "stderr", "{text}")
            }
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

    use super::*;

    /// Counts guest-output events and rate-limit warnings.
    #[derive(Clone, Default)]
    struct Counter {
        lines: Arc<AtomicUsize>,
        warnings: Arc<AtomicUsize>,
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
        fn on_event(&self, event: &tracing::Event<'_>, _ctx: LayerContext<'_, S>) {
            if event.metadata().target() != "weft::plugins::guest" {
                return;
            }
            let mut suppressed = false;
            event.record(
                &mut |field: &tracing::field::Field, _: &dyn std::fmt::Debug| {
                    suppressed |= field.name() == "suppressed";
                },
            );
            if suppressed {
                self.warnings.fetch_add(1, Ordering::SeqCst);
            } else {
                self.lines.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn guest_output_is_logged_by_line_and_rate_limited() {
        let counter = Counter::default();
        let subscriber = tracing_subscriber::registry().with(counter.clone());
        tracing::subscriber::with_default(subscriber, || {
            let mut out = GuestOutput::new(Arc::from("noisy"), Stream::Stderr);
            out.write(Bytes::from_static(b"partial ")).unwrap();
            assert_eq!(
                counter.lines.load(Ordering::SeqCst),
                0,
                "no event before the newline"
            );
            out.write(Bytes::from_static(b"line\n")).unwrap();
            assert_eq!(counter.lines.load(Ordering::SeqCst), 1);
            assert_eq!(out.tail().as_deref(), Some("partial line"));

            let flood: Vec<u8> = (0..1000)
                .flat_map(|i| format!("line {i}\n").into_bytes())
                .collect();
            out.write(Bytes::from(flood)).unwrap();
            let logged = counter.lines.load(Ordering::SeqCst);
            assert!(
                (100..=110).contains(&logged),
                "burst of 100 lines, then limited: logged {logged}"
            );
            assert!(
                out.tail().unwrap().ends_with("line 999"),
                "the tail keeps the latest output"
            );

            // Once the budget refills, the drop count is reported.
            std::thread::sleep(Duration::from_millis(150));
            out.write(Bytes::from_static(b"after\n")).unwrap();
            assert_eq!(counter.warnings.load(Ordering::SeqCst), 1);
        });
    }
}
