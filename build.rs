//! Compiles the protos with protox (no system protoc) and writes the descriptor set for reflection.

use std::path::PathBuf;

use prost::Message as _;

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=third_party/a2a");
    let files = [
        "agentrunner/v1/common.proto",
        "agentrunner/v1/agent.proto",
        "agentrunner/v1/tools.proto",
        "agentrunner/v1/admin.proto",
        "agentrunner/v1/agents.proto",
    ];
    let fds = protox::compile(files, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("agentrunner_descriptor.bin"),
        fds.encode_to_vec(),
    )?;
    // Ordered maps make a request's encoding deterministic, so idempotency keys can compare
    // requests by their bytes.
    tonic_prost_build::configure()
        .btree_map(".")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    compile_a2a(&out_dir)
}

/// The A2A protocol's gRPC binding (third_party/a2a), with a descriptor set of its own so
/// reflection lists it only where the service is served.
fn compile_a2a(out_dir: &std::path::Path) -> anyhow::Result<()> {
    let fds = protox::compile(["lf/a2a/v1/a2a.proto"], ["third_party/a2a"])?;
    std::fs::write(out_dir.join("a2a_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
