//! Process (not thread) births and deaths, so userspace keeps its process tree without rescanning
//! /proc and can credit an exited child's bytes to its parent.
use aya_ebpf::{
    EbpfContext as _, helpers::bpf_get_current_comm, macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use ioshield_common::{LifecycleEvent, lifecycle};

use crate::{
    kernel::{SIGNAL_LIVE_OFF, TASK_PID_OFF, TASK_SIGNAL_OFF, TASK_TGID_OFF, read},
    maps::emit_lifecycle,
};

/// `sched_process_fork(struct task_struct *parent, struct task_struct *child)`; also fires for new
/// threads, which have `pid != tgid`.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn process_fork(ctx: RawTracePointContext) -> i32 {
    let child: u64 = ctx.arg(1);
    // One read at a time: with both in a tuple, LLVM reads the first value only on success and
    // 6.1's verifier, which cannot carry `ret != 0` across branches, rejects the path as reading
    // an uninitialised register.
    let Some(pid) = read::<i32>(child, TASK_PID_OFF.load()) else {
        return 0;
    };
    let Some(tgid) = read::<i32>(child, TASK_TGID_OFF.load()) else {
        return 0;
    };
    if pid != tgid {
        return 0;
    }
    emit_lifecycle(LifecycleEvent {
        kind: lifecycle::FORK,
        pid: tgid as u32,
        ppid: ctx.tgid(),
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    });
    0
}
ioshield_common::check_name!(ioshield_common::names::program::PROCESS_FORK, process_fork);

/// `sched_process_exit(struct task_struct *p, ...)`: reported once, when the last thread goes
/// (`signal->live` has dropped to zero by the time the tracepoint fires).
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn process_exit(ctx: RawTracePointContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let Some(signal) = read::<u64>(task, TASK_SIGNAL_OFF.load()) else {
        return 0;
    };
    match read::<i32>(signal, SIGNAL_LIVE_OFF.load()) {
        Some(0) => {}
        _ => return 0,
    }
    emit_lifecycle(LifecycleEvent {
        kind: lifecycle::EXIT,
        pid: ctx.tgid(),
        ppid: 0,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    });
    0
}
ioshield_common::check_name!(ioshield_common::names::program::PROCESS_EXIT, process_exit);

/// `sched_process_exec`: the process now runs a new program, under a new name.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn process_exec(ctx: RawTracePointContext) -> i32 {
    emit_lifecycle(LifecycleEvent {
        kind: lifecycle::EXEC,
        pid: ctx.tgid(),
        ppid: 0,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    });
    0
}
ioshield_common::check_name!(ioshield_common::names::program::PROCESS_EXEC, process_exec);
