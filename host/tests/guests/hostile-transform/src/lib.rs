//! A transform that misbehaves on demand, for the host's sandbox tests.
//!
//! The record's `do` column picks the behaviour per change:
//! `loop` spins forever, `alloc` allocates without bound, `recurse`
//! recurses without end, `huge` returns a 17 MiB payload, `panic` panics,
//! `snoop` reports what the sandbox lets it see, `count` returns how many
//! changes this instance has handled, anything else echoes the record.
//! Config `fail_init` makes `init` fail with its value; `init_spin`
//! makes `init` spin for that many million loop turns first.

use std::hint::black_box;

use weft_sdk_guest::serde_json::{Value, json};
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Hostile {
    handled: u64,
    greeting: String,
}

impl Transform for Hostile {
    fn init(config: Config) -> Result<Self, String> {
        if let Some(reason) = config.get("fail_init") {
            return Err(reason.to_string());
        }
        if let Some(turns) = config.get("init_spin") {
            let turns: u64 = turns.parse().map_err(|_| "init_spin is a number")?;
            let mut n: u64 = 0;
            for _ in 0..turns * 1_000_000 {
                n = black_box(n.wrapping_add(1));
            }
        }
        let greeting = config.get("greeting").unwrap_or("hello").to_string();
        Ok(Hostile {
            handled: 0,
            greeting,
        })
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        self.handled += 1;
        let action: Option<String> = change.get("do")?;
        match action.as_deref() {
            Some("loop") => {
                let mut n: u64 = 0;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            Some("alloc") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(black_box(vec![1u8; 1 << 20]));
                }
            }
            Some("recurse") => Ok(Payload::Json(json!(recurse(black_box(1))))),
            Some("huge") => Ok(Payload::Bytes {
                content_type: "application/octet-stream".into(),
                data: vec![7u8; 17 << 20],
            }),
            Some("panic") => panic!("hostile guest panicked on purpose"),
            Some("snoop") => Ok(Payload::Json(snoop())),
            Some("count") => Ok(Payload::Json(
                json!({"handled": self.handled, "greeting": self.greeting}),
            )),
            Some("print") => {
                for i in 0..1000 {
                    println!("stdout line {i}");
                    eprintln!("stderr line {i}");
                }
                Ok(Payload::Json(json!("printed")))
            }
            Some("bytes") => Ok(Payload::Bytes {
                content_type: "application/octet-stream".into(),
                data: vec![0, 1, 2, 255],
            }),
            Some("fail") => Err(Error::permanent("bad row")),
            Some("retry") => Err(Error::transient("try later")),
            _ => Ok(Payload::Json(Value::Object(change.record()?.clone()))),
        }
    }
}

/// Recurses until the stack runs out; the frame keeps a buffer so that
/// the compiler cannot turn it into a loop.
#[allow(unconditional_recursion)] // the point: it never returns
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 64]);
    recurse(depth + 1) + frame[depth as usize % 64]
}

fn snoop() -> Value {
    let file = match std::fs::read("/etc/passwd") {
        Ok(bytes) => format!("read {} bytes", bytes.len()),
        Err(e) => format!("error: {e}"),
    };
    let dir = match std::fs::read_dir(".") {
        Ok(entries) => format!("listed {} entries", entries.count()),
        Err(e) => format!("error: {e}"),
    };
    let tcp = match std::net::TcpStream::connect("127.0.0.1:22") {
        Ok(_) => "connected".to_string(),
        Err(e) => format!("error: {e}"),
    };
    json!({
        "file": file,
        "dir": dir,
        "tcp": tcp,
        "env": std::env::vars().count(),
        "home": std::env::var("HOME").ok(),
        "args": std::env::args().count(),
        "now_ok": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).is_ok(),
    })
}

export_transform!(Hostile);
