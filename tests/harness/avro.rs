//! Decodes Avro with an independent implementation, Python's fastavro
//! (installed by `scripts/ensure-python-tools.sh`), to check what weft's Avro
//! encoder wrote.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::python_tools::python;

/// Reads one schemaless Avro datum from stdin against the schema in argv[1]
/// and prints it as JSON; decimals, uuids, dates and timestamps as their
/// `str()` (e.g. `Decimal('12.50')` prints `12.50`). Fails on trailing bytes.
const DECODE: &str = r#"
import io, json, sys
import fastavro
schema = fastavro.parse_schema(json.loads(sys.argv[1]))
data = sys.stdin.buffer.read()
stream = io.BytesIO(data)
record = fastavro.schemaless_reader(stream, schema)
if stream.tell() != len(data):
    sys.exit(f"{len(data) - stream.tell()} bytes left after the datum")
print(json.dumps(record, default=str, sort_keys=True))
"#;

/// The datum in `data` decoded with fastavro against `schema` (JSON text).
pub fn decode(schema: &str, data: &[u8]) -> Value {
    let mut child = Command::new(python())
        .args(["-c", DECODE, schema])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python with fastavro");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "fastavro could not decode {data:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("fastavro printed JSON")
}
