//! Generates the prost types from every `proto/*.proto` file.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from("proto");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("proto/ exists")
        .map(|e| e.expect("readable proto/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "proto"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed=proto");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    prost_build::Config::new()
        .compile_protos(&files, &[dir])
        .expect(
            "protoc compiles proto/*.proto (is protobuf-compiler installed? run scripts/setup.sh)",
        );
}
