//! Generates the prost types of `proto/attestation.proto`.

fn main() {
    println!("cargo:rerun-if-changed=proto/attestation.proto");
    prost_build::Config::new()
        .compile_protos(&["proto/attestation.proto"], &["proto"])
        .expect("protoc compiles proto/attestation.proto (is protobuf-compiler installed? run scripts/setup.sh)");
}
