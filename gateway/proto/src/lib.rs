//! rl-gateway's protobuf messages and gRPC services: the part of Envoy's API it uses (the
//! rate limit service it serves, xDS it reads its configuration from), in modules named
//! after the protos' packages (`envoy::service::ratelimit::v3`, ...), clients and servers
//! both (the gateway's tests and rl-loadgen are the other side). The well-known types
//! (google.protobuf) are prost-types'.
//!
//! The code in `generated/` is written by `make proto` (protoc from grpcio-tools, then
//! protogen/: tonic's generator on prost-build) from the `.proto` files beside this crate
//! and committed, so that no build needs protoc or compiles a code generator; `make lint`
//! fails while it is stale.

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod generated;

pub use generated::*;

/// The rate limit service's protos (`envoy/service/ratelimit/v3/rls.proto` and its imports,
/// well-known types included) as a descriptor set, for gRPC server reflection.
pub const RLS_DESCRIPTOR_SET: &[u8] = include_bytes!("../rls.binpb");
