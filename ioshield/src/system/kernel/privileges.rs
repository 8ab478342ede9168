//! Checks that this process may load BPF programs and read tracefs, before trying and failing with
//! a less helpful kernel error.
use anyhow::{Result, bail};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

pub fn require_bpf_privileges() -> Result<()> {
    let caps = effective_caps();
    let has = |c: u32| caps & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let uid = nix::unistd::geteuid();
    bail!(
        "needs root (or CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH) to load its BPF programs; \
         running as uid {uid} without them: try `sudo ioshield ...`"
    )
}
