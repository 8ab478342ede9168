//! Loads the BPF object with this kernel's offsets and attaches what the kernel supports, falling
//! back (and saying so once) where a feature is missing.
use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    programs::{Program, RawTracePoint, TracePoint},
};

use ioshield_common::names::{global, map, program};

use super::{DirtyMode, Features, ProgramCost};
use crate::{
    system::kernel::{self, btf::KernelBtf, privileges, tracefs::Tracefs},
    system::vmstat,
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ioshield"));

pub struct Loaded {
    pub ebpf: Ebpf,
    pub features: Features,
    attached: Vec<&'static str>,
}

impl Loaded {
    pub fn costs(&self) -> Vec<ProgramCost> {
        self.attached
            .iter()
            .filter_map(|name| {
                let info = match self.ebpf.program(name)? {
                    Program::RawTracePoint(p) => p.info().ok()?,
                    Program::TracePoint(p) => p.info().ok()?,
                    _ => return None,
                };
                Some(ProgramCost {
                    name: name.to_string(),
                    run_count: info.run_count(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                })
            })
            .collect()
    }
}

/// Offsets into kernel structs, from BTF. Missing BTF (or a struct layout we do not know) means
/// the page-event fallback and no lifecycle events.
#[derive(Default)]
struct StructOffsets {
    folio_flags: u32,
    folio_nr_pages: u32,
    folio_index: u32,
    pg_head_mask: u64,
    mapping_host: u32,
    inode_sb: u32,
    inode_mode: u32,
    inode_rdev: u32,
    sb_dev: u32,
    task_pid: u32,
    task_tgid: u32,
    task_signal: u32,
    signal_live: u32,
}

impl StructOffsets {
    fn from_btf(btf: &KernelBtf, dirty_tracepoint: &str) -> Result<Self> {
        let mut o = Self {
            mapping_host: btf.offset("address_space", "host")?,
            inode_sb: btf.offset("inode", "i_sb")?,
            inode_mode: btf.offset("inode", "i_mode")?,
            inode_rdev: btf.offset("inode", "i_rdev")?,
            sb_dev: btf.offset("super_block", "s_dev")?,
            task_pid: btf.offset("task_struct", "pid")?,
            task_tgid: btf.offset("task_struct", "tgid")?,
            task_signal: btf.offset("task_struct", "signal")?,
            signal_live: btf.offset("signal_struct", "live")?,
            ..Self::default()
        };
        // writeback_dirty_page kernels predate large folios in the page cache: one page per event.
        if dirty_tracepoint == "writeback_dirty_folio" {
            o.folio_flags = btf.offset("folio", "flags")?;
            o.folio_nr_pages = btf.offset_any("folio", &["_nr_pages", "_folio_nr_pages"])?;
            o.pg_head_mask = 1u64 << btf.enum_value("pageflags", "PG_head")?;
        }
        // The same field of a page on writeback_dirty_page kernels. Without it writers of many
        // small files are not told from copies: held like any writer (logged at start).
        let index = match dirty_tracepoint {
            "writeback_dirty_folio" => btf.offset_any("folio", &["index"]),
            _ => btf.offset_any("page", &["index"]),
        };
        o.folio_index = index.unwrap_or(0);
        Ok(o)
    }
}

const DIRTY_TRACEPOINTS: [&str; 2] = ["writeback_dirty_folio", "writeback_dirty_page"];

pub fn load_and_attach() -> Result<Loaded> {
    privileges::require_bpf_privileges()?;
    let tracefs = Tracefs::open()?;
    let dirty_tp = tracefs
        .first_of("writeback", &DIRTY_TRACEPOINTS)
        .ok_or_else(|| {
            anyhow!(
                "tracepoint writeback:writeback_dirty_folio (or writeback_dirty_page) is missing \
                 on this kernel ({}): ioshield cannot see who dirties pages",
                kernel_release()
            )
        })?;

    let offsets = KernelBtf::load()
        .and_then(|btf| StructOffsets::from_btf(&btf, dirty_tp))
        .map_err(|e| {
            tracing::warn!(
                "kernel struct offsets unavailable ({e:#}): counting one page per dirty event \
                 (undercounts large folios) and rescanning /proc for process changes"
            )
        })
        .ok();

    let dirty_format = tracefs.format("writeback", dirty_tp)?;
    let name_off = dirty_format
        .offset_of("name", 32)
        .with_context(|| format!("tracepoint writeback:{dirty_tp}"))?;
    let bdp = tracefs
        .has("writeback", "balance_dirty_pages")
        .then(|| tracefs.format("writeback", "balance_dirty_pages"))
        .transpose()?
        .and_then(
            |f| match (f.offset_of("bdi", 32), f.offset_of("pause", 8)) {
                (Ok(bdi), Ok(pause)) => Some((bdi, pause)),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!("tracepoint writeback:balance_dirty_pages unusable: {e}");
                    None
                }
            },
        );
    if bdp.is_none() {
        tracing::warn!("throttling by balance_dirty_pages is not measured on this kernel");
    }
    let commits = journal_offsets(&tracefs);
    let run_stats = run_stats_offsets(&tracefs);

    let o = offsets.as_ref();
    let page_size = vmstat::page_size();
    let globals: [(&str, u32); 19] = [
        (global::FOLIO_FLAGS_OFF, o.map_or(0, |o| o.folio_flags)),
        (
            global::FOLIO_NR_PAGES_OFF,
            o.map_or(0, |o| o.folio_nr_pages),
        ),
        (global::FOLIO_INDEX_OFF, o.map_or(0, |o| o.folio_index)),
        (global::MAPPING_HOST_OFF, o.map_or(0, |o| o.mapping_host)),
        (global::INODE_SB_OFF, o.map_or(0, |o| o.inode_sb)),
        (global::INODE_MODE_OFF, o.map_or(0, |o| o.inode_mode)),
        (global::INODE_RDEV_OFF, o.map_or(0, |o| o.inode_rdev)),
        (global::SB_DEV_OFF, o.map_or(0, |o| o.sb_dev)),
        (global::TASK_PID_OFF, o.map_or(0, |o| o.task_pid)),
        (global::TASK_TGID_OFF, o.map_or(0, |o| o.task_tgid)),
        (global::TASK_SIGNAL_OFF, o.map_or(0, |o| o.task_signal)),
        (global::SIGNAL_LIVE_OFF, o.map_or(0, |o| o.signal_live)),
        (global::DIRTY_TP_NAME_OFF, name_off),
        (global::BDP_BDI_OFF, bdp.map_or(0, |b| b.0)),
        (global::BDP_PAUSE_OFF, bdp.map_or(0, |b| b.1)),
        (global::COMMIT_START_DEV_OFF, commits.map_or(0, |c| c.0)),
        (global::COMMIT_END_DEV_OFF, commits.map_or(0, |c| c.1)),
        (global::RUN_STATS_DEV_OFF, run_stats.map_or(0, |r| r.0)),
        (global::RUN_STATS_LOGGED_OFF, run_stats.map_or(0, |r| r.1)),
    ];
    let pg_head_mask = o.map_or(0, |o| o.pg_head_mask);
    let mut loader = EbpfLoader::new();
    for (name, value) in &globals {
        loader.override_global(name, value, true);
    }
    loader.override_global(global::PG_HEAD_MASK, &pg_head_mask, true);
    loader.override_global(global::PAGE_SIZE, &page_size, true);
    let long_commit = super::journal::LONG_COMMIT.as_nanos() as u64;
    loader.override_global(global::LONG_COMMIT_NS, &long_commit, true);
    if let Some(n) = kernel::test_counter_entries() {
        loader.map_max_entries(map::COUNTERS, n);
    }
    if let Some(n) = kernel::test_lifecycle_bytes() {
        loader.map_max_entries(map::LIFECYCLE, n);
    }
    let mut ebpf = loader.load(OBJECT).map_err(|e| {
        anyhow!(
            "the kernel refused ioshield's BPF maps or programs ({e}); is BPF enabled \
             (CONFIG_BPF_SYSCALL) and not locked down?"
        )
    })?;

    let mut attached = Vec::new();
    let dirty_mode = if offsets.is_some() {
        attach_raw(&mut ebpf, program::DIRTY_FOLIO, dirty_tp)?;
        attached.push(program::DIRTY_FOLIO);
        DirtyMode::FolioBytes
    } else {
        attach_classic(
            &mut ebpf,
            program::DIRTY_FOLIO_EVENTS,
            "writeback",
            dirty_tp,
        )?;
        attached.push(program::DIRTY_FOLIO_EVENTS);
        DirtyMode::PageEvents
    };
    // Throttling is measured for the view, not needed to find offenders: a kernel that refuses
    // this attach (perf_event_open under perf_event_paranoid=3 without CAP_SYS_ADMIN) costs that
    // column, not the daemon.
    let throttle = bdp.is_some()
        && match attach_classic(
            &mut ebpf,
            program::BALANCE_DIRTY_PAGES,
            "writeback",
            "balance_dirty_pages",
        ) {
            Ok(()) => {
                attached.push(program::BALANCE_DIRTY_PAGES);
                true
            }
            Err(e) => {
                tracing::warn!("throttling by balance_dirty_pages is not measured: {e:#}");
                false
            }
        };
    // Long journal commits are counted for the metrics only: a kernel without them (no ext4
    // loaded, another filesystem) costs that metric.
    let journal = commits.is_some()
        && match attach_classic(
            &mut ebpf,
            program::JOURNAL_COMMIT_START,
            "jbd2",
            "jbd2_start_commit",
        )
        .and_then(|()| {
            attach_classic(
                &mut ebpf,
                program::JOURNAL_COMMIT_END,
                "jbd2",
                "jbd2_end_commit",
            )
        }) {
            Ok(()) => {
                attached.extend([program::JOURNAL_COMMIT_START, program::JOURNAL_COMMIT_END]);
                true
            }
            Err(e) => {
                tracing::warn!("long journal commits are not counted: {e:#}");
                false
            }
        };
    // Without it the journal's writes count as dirty data written: a backlog beside
    // committing loads reads low (said once, here).
    let journal_logged = run_stats.is_some()
        && match attach_classic(&mut ebpf, program::JOURNAL_LOGGED, "jbd2", "jbd2_run_stats") {
            Ok(()) => {
                attached.push(program::JOURNAL_LOGGED);
                true
            }
            Err(e) => {
                tracing::warn!("the journal's writes are not told from dirty data written: {e:#}");
                false
            }
        };
    let lifecycle = offsets.is_some();
    if lifecycle {
        attach_raw(&mut ebpf, program::PROCESS_FORK, "sched_process_fork")?;
        attach_raw(&mut ebpf, program::PROCESS_EXEC, "sched_process_exec")?;
        attach_raw(&mut ebpf, program::PROCESS_EXIT, "sched_process_exit")?;
        attached.extend([
            program::PROCESS_FORK,
            program::PROCESS_EXEC,
            program::PROCESS_EXIT,
        ]);
    }
    let files = dirty_mode == DirtyMode::FolioBytes && o.is_some_and(|o| o.folio_index != 0);
    if !files {
        tracing::warn!(
            "files written are not counted on this kernel (no folio index in its BTF): writers \
             of many small files are held like copies"
        );
    }
    let features = Features {
        dirty_tracepoint: dirty_tp.to_string(),
        dirty_mode,
        throttle,
        lifecycle,
        files,
        journal,
        journal_logged,
    };
    tracing::debug!(?features, "probes attached");
    Ok(Loaded {
        ebpf,
        features,
        attached,
    })
}

/// The offsets of `dev` in the jbd2 commit tracepoints' records, when this kernel has them (jbd2
/// is a module: loaded with the first ext4 or ext3 mount).
fn journal_offsets(tracefs: &Tracefs) -> Option<(u32, u32)> {
    let dev_of = |name: &str| {
        tracefs
            .has("jbd2", name)
            .then(|| tracefs.format("jbd2", name).ok()?.offset_of("dev", 4).ok())
            .flatten()
    };
    let found = dev_of("jbd2_start_commit").zip(dev_of("jbd2_end_commit"));
    if found.is_none() {
        tracing::info!(
            "long journal commits are not counted: no usable jbd2 tracepoints (no ext4 mounted)"
        );
    }
    found
}

/// The offsets of `dev` and `blocks_logged` in `jbd2_run_stats`, when this kernel has it.
fn run_stats_offsets(tracefs: &Tracefs) -> Option<(u32, u32)> {
    let name = "jbd2_run_stats";
    let format = tracefs
        .has("jbd2", name)
        .then(|| tracefs.format("jbd2", name).ok())
        .flatten();
    let found = format.and_then(|f| {
        f.offset_of("dev", 4)
            .ok()
            .zip(f.offset_of("blocks_logged", 4).ok())
    });
    if found.is_none() {
        tracing::info!(
            "the journal's writes are not told from dirty data written: no usable \
             jbd2_run_stats tracepoint (no ext4 mounted)"
        );
    }
    found
}

fn attach_raw(ebpf: &mut Ebpf, program: &str, tracepoint: &str) -> Result<()> {
    let p: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| anyhow!("program {program} missing from the BPF object"))?
        .try_into()?;
    p.load()
        .map_err(|e| verifier_error(program, e.into()))
        .and_then(|()| {
            p.attach(tracepoint)
                .with_context(|| format!("attaching {program} to raw tracepoint {tracepoint}"))
        })?;
    Ok(())
}

fn attach_classic(ebpf: &mut Ebpf, program: &str, category: &str, name: &str) -> Result<()> {
    let p: &mut TracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| anyhow!("program {program} missing from the BPF object"))?
        .try_into()?;
    p.load().map_err(|e| verifier_error(program, e.into()))?;
    p.attach(category, name)
        .with_context(|| format!("attaching {program} to tracepoint {category}:{name}"))?;
    Ok(())
}

fn verifier_error(program: &str, e: anyhow::Error) -> anyhow::Error {
    // The verifier log is long; keep the one-line error and put the log in debug output.
    tracing::debug!("loading {program}: {e:?}");
    anyhow!("the kernel rejected BPF program {program}: {e}")
}

fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown kernel".into())
}
