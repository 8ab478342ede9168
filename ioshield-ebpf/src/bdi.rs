//! Tracepoint records name a device by its bdi name, e.g. `"254:0"`; turn that into a `dev_t`.

/// Parses `"MAJ:MIN"` at the start of `name` into the kernel's `major << 20 | minor`. Returns 0
/// for names that are not of that form (e.g. `btrfs-1`), which userspace shows as unknown.
#[inline(always)]
pub fn parse_dev(name: &[u8; 32]) -> u32 {
    let mut major: u32 = 0;
    let mut minor: u32 = 0;
    let mut seen_colon = false;
    let mut digits = 0u32;
    let mut i = 0;
    while i < 16 {
        let c = name[i];
        if c == b':' && !seen_colon && digits > 0 {
            seen_colon = true;
            digits = 0;
        } else if c.is_ascii_digit() {
            let d = (c - b'0') as u32;
            if seen_colon {
                minor = minor * 10 + d;
            } else {
                major = major * 10 + d;
            }
            digits += 1;
        } else {
            break;
        }
        i += 1;
    }
    if !seen_colon || digits == 0 {
        return 0;
    }
    (major << 20) | (minor & 0xfffff)
}
