//! `[exclude]`: entries that can never match are errors, not silent no-ops.
use super::{
    Exclude,
    file::{ConfigError, Ctx},
    raw::RawExclude,
};

/// The kernel's TASK_COMM_LEN less its NUL: a longer name can never equal a process's comm.
const COMM_MAX: usize = 15;

pub(super) fn exclude(ctx: &Ctx, raw: &RawExclude) -> Result<Exclude, ConfigError> {
    let mut out = Exclude {
        uid: raw.uid.clone(),
        ..Exclude::default()
    };
    for comm in &raw.comm {
        let c = ctx.value(&Some(comm.clone()), "exclude.comm", |c: &String| {
            if c.is_empty() || c.len() > COMM_MAX {
                Err(format!(
                    "`{c}` can never match: a process name (comm) is 1 to {COMM_MAX} bytes"
                ))
            } else {
                Ok(c.clone())
            }
        })?;
        out.comm.extend(c);
    }
    for cgroup in &raw.cgroup {
        let c = ctx.value(&Some(cgroup.clone()), "exclude.cgroup", |c: &String| {
            if c.starts_with('/') {
                Ok(c.clone())
            } else {
                Err(format!(
                    "`{c}` can never match: cgroup paths start with / as in /proc/PID/cgroup, \
                     e.g. \"/system.slice/backup.service\""
                ))
            }
        })?;
        out.cgroup.extend(c);
    }
    Ok(out)
}
