//! `weft plugin build`: the commands of `scripts/build-examples.sh`, run on
//! a scaffolded project. The component is written to `<dir>/<name>.wasm`
//! (through a temporary file, so a failed build leaves no broken file).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::io;
use super::toolchain::{Toolchain, require_command, require_file};
use super::{Lang, Marker, ProjectError, templates};

/// Builds the project in `dir` and returns the component's path.
pub fn build(dir: &Path) -> Result<PathBuf, ProjectError> {
    let marker = Marker::read(dir)?;
    let out = dir.join(format!("{}.wasm", marker.name));
    let tmp = dir.join(format!("{}.wasm.tmp", marker.name));
    let wit = dir.join("wit");
    let world = marker.kind.as_str();
    let source = dir.join(templates::source_path(marker.lang));
    match marker.lang {
        Lang::Rust => build_rust(dir, &tmp)?,
        Lang::Js => {
            let toolchain = Toolchain::load()?;
            run(Command::new(toolchain.tool("componentize_js")?)
                .arg(&source)
                .arg("--wit")
                .arg(&wit)
                .args(["--world-name", world])
                // The sandbox grants no HTTP.
                .args(["--disable", "http", "fetch-event", "-o"])
                .arg(&tmp))?;
        }
        Lang::Python => {
            let toolchain = Toolchain::load()?;
            run(Command::new(toolchain.tool("componentize_py")?)
                .arg("-d")
                .arg(&wit)
                .args(["-w", world, "componentize", "-p"])
                .arg(dir)
                .args(["app", "-o"])
                .arg(&tmp))?;
        }
        Lang::C => build_c(dir, &marker, &source, &tmp)?,
    }
    if !is_component(&tmp) {
        return Err(ProjectError::NotAComponent(tmp));
    }
    std::fs::rename(&tmp, &out).map_err(io(&out))?;
    Ok(out)
}

/// cargo for wasm32-wasip2; the artifact's path comes from cargo's JSON
/// messages, wherever `CARGO_TARGET_DIR` puts it.
fn build_rust(dir: &Path, tmp: &Path) -> Result<(), ProjectError> {
    require_command("cargo", "Rust with rustup (https://rustup.rs)")?;
    let mut command = Command::new("cargo");
    command
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .args(["--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped());
    let output = command
        .spawn()
        .and_then(|child| child.wait_with_output())
        .map_err(io(dir))?;
    if !output.status.success() {
        return Err(failed(&command, output.status));
    }
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .flat_map(|message| message["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|name| name.as_str().map(PathBuf::from))
        .rfind(|name| name.extension().is_some_and(|e| e == "wasm"))
        .ok_or_else(|| ProjectError::NotAComponent(dir.join("target")))?;
    std::fs::copy(&wasm, tmp).map_err(io(&wasm))?;
    Ok(())
}

/// wit-bindgen's bindings and clang with wasi-libc make a preview1 core
/// module (a reactor: no main); wasm-tools and the WASI adapter make it a
/// component.
fn build_c(dir: &Path, marker: &Marker, source: &Path, tmp: &Path) -> Result<(), ProjectError> {
    require_command("clang", "clang")?;
    require_command("wasm-ld", "lld")?;
    require_file("/usr/lib/wasm32-wasi/libc.a", "wasi-libc")?;
    let toolchain = Toolchain::load()?;
    let world = marker.kind.as_str();
    let build = dir.join("build");
    std::fs::create_dir_all(&build).map_err(io(&build))?;
    run(Command::new(toolchain.tool("wit_bindgen")?)
        .arg("c")
        .arg(dir.join("wit"))
        .args(["--world", world, "--out-dir"])
        .arg(&build))?;
    let core = build.join(format!("{}.core.wasm", marker.name));
    run(Command::new("clang")
        .args([
            "--target=wasm32-wasi",
            "--sysroot=/",
            "-isystem",
            "/usr/include/wasm32-wasi",
        ])
        .args([
            "-L/usr/lib/wasm32-wasi",
            "-mexec-model=reactor",
            "-Os",
            "-Wall",
            "-Wextra",
        ])
        .args(["-Werror", "-Wno-unused-parameter", "-I"])
        .arg(&build)
        .arg("-o")
        .arg(&core)
        .arg(source)
        .arg(build.join(format!("{world}.c")))
        .arg(build.join(format!("{world}_component_type.o"))))?;
    let wasm_tools = toolchain.tool("wasm_tools")?;
    let adapter = toolchain.tool("wasi_adapter")?;
    run(Command::new(wasm_tools)
        .args(["component", "new"])
        .arg(&core)
        .arg("--adapt")
        .arg(format!("wasi_snapshot_preview1={}", adapter.display()))
        .arg("-o")
        .arg(tmp))?;
    run(Command::new(wasm_tools).arg("validate").arg(tmp))
}

/// Runs `command` with its output on stderr (stdout is for the result).
fn run(command: &mut Command) -> Result<(), ProjectError> {
    let status = command
        .stdout(std::io::stderr())
        .status()
        .map_err(io(command.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(failed(command, status))
    }
}

fn failed(command: &Command, status: std::process::ExitStatus) -> ProjectError {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    ProjectError::CommandFailed {
        command: line,
        status: status.to_string(),
    }
}

/// Whether `file` starts with a component's preamble (`\0asm`, version
/// 0x0d, layer 1), not a core module's.
fn is_component(file: &Path) -> bool {
    std::fs::read(file).is_ok_and(|bytes| bytes.get(..8) == Some(b"\0asm\x0d\0\x01\0"))
}
