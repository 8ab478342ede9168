//! `ioshield doctor`: one line per thing ioshield needs or uses on this machine, whether it is
//! there, and what follows when it is not. Exits non-zero when ioshield cannot protect this
//! machine at all (it cannot see who dirties pages).
mod checks;

use anyhow::{Result, bail};

use crate::output;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Ok,
    /// Works, with less than it could (a fallback).
    Degraded,
    /// ioshield cannot protect the machine without it.
    Missing,
}

pub struct Finding {
    pub level: Level,
    pub what: String,
    pub detail: String,
}

impl Finding {
    pub fn ok(what: &str, detail: impl Into<String>) -> Finding {
        Finding {
            level: Level::Ok,
            what: what.into(),
            detail: detail.into(),
        }
    }
    pub fn degraded(what: &str, detail: impl Into<String>) -> Finding {
        Finding {
            level: Level::Degraded,
            what: what.into(),
            detail: detail.into(),
        }
    }
    pub fn missing(what: &str, detail: impl Into<String>) -> Finding {
        Finding {
            level: Level::Missing,
            what: what.into(),
            detail: detail.into(),
        }
    }
}

pub fn render(findings: &[Finding]) -> String {
    let width = findings.iter().map(|f| f.what.len()).max().unwrap_or(0);
    findings
        .iter()
        .map(|f| {
            let word = match f.level {
                Level::Ok => "ok",
                Level::Degraded => "degraded",
                Level::Missing => "MISSING",
            };
            format!("{word:<9}{:<width$}  {}\n", f.what, f.detail)
        })
        .collect()
}

pub async fn run() -> Result<()> {
    let findings = checks::all().await;
    output::print(&render(&findings))?;
    let missing: Vec<&str> = findings
        .iter()
        .filter(|f| f.level == Level::Missing)
        .map(|f| f.what.as_str())
        .collect();
    if !missing.is_empty() {
        bail!(
            "ioshield cannot protect this machine: {} missing",
            missing.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_aligned_line_per_finding() {
        let text = render(&[
            Finding::ok("BTF", "/sys/kernel/btf/vmlinux"),
            Finding::missing("tracepoint x", "cannot see writers"),
        ]);
        assert_eq!(
            text,
            "ok       BTF           /sys/kernel/btf/vmlinux\n\
             MISSING  tracepoint x  cannot see writers\n"
        );
    }
}
