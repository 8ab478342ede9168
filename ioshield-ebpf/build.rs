use which::which;

/// The crate has an undeclared dependency on the `bpf-linker` binary; rebuild when it changes.
fn main() {
    if let Ok(linker) = which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
