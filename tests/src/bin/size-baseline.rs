//! The size baseline: a static musl "hello world" built with the same release
//! profile as the real binaries, so size checks can print ratios measured in
//! the same run.

fn main() {
    println!("hello from the size baseline");
}
