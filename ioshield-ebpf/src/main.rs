//! ioshield's BPF programs. Each one only adds to in-kernel counters (or queues a lifecycle event);
//! userspace reads everything once per tick. The one exception is a burst (`burst`): a process
//! dirtying faster than its disk writes wakes userspace once per window. Rare conditions
//! are also logged through aya-log (`diag`), rate-limited.
#![no_std]
#![no_main]

mod bdi;
mod burst;
mod diag;
mod dirty;
mod journal;
mod kernel;
mod lifecycle;
mod maps;
mod throttle;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
