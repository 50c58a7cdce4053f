//! The `weft` command-line interface.

fn main() -> anyhow::Result<()> {
    Ok(())
}
