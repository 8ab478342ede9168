//! tracefs: where it is, which tracepoints exist, and the field offsets of their records.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Finds a mounted tracefs, mounting it at /sys/kernel/tracing if needed.
    pub fn open() -> Result<Self> {
        if let Some(root) = CANDIDATES
            .iter()
            .map(Path::new)
            .find(|p| p.join("events").is_dir())
        {
            return Ok(Self {
                root: root.to_path_buf(),
            });
        }
        let target = Path::new(CANDIDATES[0]);
        nix::mount::mount(
            Some("tracefs"),
            target,
            Some("tracefs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .with_context(|| {
            format!(
                "tracefs is not mounted and mounting it at {} failed; mount it with \
                 `mount -t tracefs tracefs {}`",
                target.display(),
                target.display()
            )
        })?;
        tracing::info!("mounted tracefs at {}", target.display());
        Ok(Self {
            root: target.to_path_buf(),
        })
    }

    pub fn has(&self, category: &str, name: &str) -> bool {
        !super::hidden(&format!("tracepoint:{name}"))
            && self.root.join("events").join(category).join(name).is_dir()
    }

    /// The first of `names` that this kernel has (tracepoints get renamed across versions).
    pub fn first_of<'a>(&self, category: &str, names: &[&'a str]) -> Option<&'a str> {
        names.iter().copied().find(|n| self.has(category, n))
    }

    pub fn format(&self, category: &str, name: &str) -> Result<Format> {
        let path = self
            .root
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Format::parse(&text))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// A tracepoint record layout, from its `format` file.
#[derive(Debug, Default)]
pub struct Format {
    fields: HashMap<String, Field>,
}

impl Format {
    pub fn parse(text: &str) -> Self {
        let mut fields = HashMap::new();
        for line in text.lines() {
            let mut decl = None;
            let mut offset = None;
            let mut size = None;
            for part in line.split(';') {
                let part = part.trim();
                if let Some(d) = part.strip_prefix("field:") {
                    decl = Some(d);
                } else if let Some(o) = part.strip_prefix("offset:") {
                    offset = o.parse().ok();
                } else if let Some(s) = part.strip_prefix("size:") {
                    size = s.parse().ok();
                }
            }
            if let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) {
                let name = decl
                    .rsplit(' ')
                    .next()
                    .unwrap_or(decl)
                    .split('[')
                    .next()
                    .unwrap_or_default();
                fields.insert(name.to_string(), Field { offset, size });
            }
        }
        Self { fields }
    }

    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields.get(name).copied()
    }

    /// The offset of `name`, which must have `size` bytes (a type change breaks the BPF reader).
    pub fn offset_of(&self, name: &str, size: u32) -> Result<u32> {
        match self.field(name) {
            Some(f) if f.size == size => Ok(f.offset),
            Some(f) => bail!("field {name} has {} bytes, expected {size}", f.size),
            None => bail!("no field {name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BDP: &str = "name: balance_dirty_pages
ID: 700
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:char bdi[32];\toffset:8;\tsize:32;\tsigned:0;
\tfield:unsigned long limit;\toffset:40;\tsize:8;\tsigned:0;
\tfield:long pause;\toffset:112;\tsize:8;\tsigned:1;
\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;
";

    #[test]
    fn parses_fields_arrays_and_data_loc() {
        let f = Format::parse(BDP);
        assert_eq!(
            f.field("bdi"),
            Some(Field {
                offset: 8,
                size: 32
            })
        );
        assert_eq!(f.offset_of("pause", 8).unwrap(), 112);
        assert_eq!(f.field("parent_comm").unwrap().size, 4);
        assert!(f.offset_of("limit", 4).is_err());
        assert!(f.field("setpoint").is_none());
    }
}
