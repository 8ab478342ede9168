//! The BPF programs' own diagnostics (aya-log records: a full counter map, an implausible folio
//! size), passed on to ioshield's log with the kernel side named as their source.
use aya::Ebpf;
use aya_log::EbpfLogger;

/// aya-log speaks the `log` crate's interface; ioshield logs through `tracing`.
struct ToTracing;

impl log::Log for ToTracing {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = record.args();
        match record.level() {
            log::Level::Error => tracing::error!("BPF: {message}"),
            log::Level::Warn => tracing::warn!("BPF: {message}"),
            log::Level::Info => tracing::info!("BPF: {message}"),
            log::Level::Debug | log::Level::Trace => tracing::debug!("BPF: {message}"),
        }
    }

    fn flush(&self) {}
}

pub struct KernelLog(EbpfLogger<ToTracing>);

impl KernelLog {
    /// Takes the log ring buffer out of the loaded object. Without it the programs still count;
    /// only their diagnostics are lost, so this is a warning, not an error.
    pub fn attach(ebpf: &mut Ebpf) -> Option<KernelLog> {
        match EbpfLogger::init_with_logger(ebpf, ToTracing) {
            Ok(l) => Some(KernelLog(l)),
            Err(e) => {
                tracing::warn!("BPF diagnostics unavailable: {e}");
                None
            }
        }
    }

    /// Passes on whatever the programs logged since the last call.
    pub fn drain(&mut self) {
        self.0.flush();
    }
}
