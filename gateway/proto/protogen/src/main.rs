//! `rl-protogen DESCRIPTOR_SET OUT_DIR`: rl-gateway's protobuf messages and gRPC services
//! (clients and servers: the gateway serves the rate limit service and is an xDS client, its
//! tests the other way round) from the descriptor set protoc wrote for gateway/proto (with
//! `--include_imports --include_source_info`, so the protos' comments become doc comments).
//!
//! OUT_DIR gets one file per package and `mod.rs`, the module tree that includes them
//! (`envoy::service::ratelimit::v3`, ...). The well-known types (google.protobuf) are
//! prost-types', not generated again.

use std::path::PathBuf;
use std::process::ExitCode;

use prost::Message;
use prost_types::FileDescriptorSet;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [descriptors, out_dir] = args.as_slice() else {
        eprintln!("usage: rl-protogen DESCRIPTOR_SET OUT_DIR");
        return ExitCode::from(2);
    };
    match generate(descriptors, &PathBuf::from(out_dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rl-protogen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(descriptors: &str, out_dir: &PathBuf) -> Result<(), String> {
    let bytes = std::fs::read(descriptors).map_err(|e| format!("{descriptors}: {e}"))?;
    // The well-known types' files (--include_imports) stay: prost-build resolves the
    // messages' fields through them, and maps the package to prost-types by itself.
    let fds =
        FileDescriptorSet::decode(bytes.as_slice()).map_err(|e| format!("{descriptors}: {e}"))?;
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    tonic_prost_build::configure()
        .out_dir(out_dir)
        .include_file("mod.rs")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)
        .map_err(|e| format!("code generation: {e}"))
}
