//! Struct member offsets and enum values from the running kernel's BTF. aya-ebpf has no CO-RE, so
//! the BPF programs get these as globals.
use anyhow::{Context as _, Result, anyhow, bail};
use btf_rs::{Btf, Type};

pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    pub fn load() -> Result<Self> {
        if super::hidden("btf") {
            bail!("BTF hidden by IOSHIELD_TEST_HIDE");
        }
        let path = "/sys/kernel/btf/vmlinux";
        let btf = Btf::from_file(path).map_err(|e| anyhow!("reading {path}: {e}"))?;
        Ok(Self { btf })
    }

    fn named_struct(&self, name: &str) -> Result<btf_rs::Struct> {
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|e| anyhow!("struct {name}: {e}"))?;
        types
            .into_iter()
            .find_map(|t| match t {
                Type::Struct(s) if !s.members.is_empty() => Some(s),
                _ => None,
            })
            .ok_or_else(|| anyhow!("no struct {name} in kernel BTF"))
    }

    /// Byte offset of `member` in `struct name`, searching through anonymous structs and unions
    /// (the kernel nests many fields that way, e.g. `folio->_nr_pages`).
    pub fn offset(&self, name: &str, member: &str) -> Result<u32> {
        let s = self.named_struct(name)?;
        self.find(&s, member)?
            .ok_or_else(|| anyhow!("no member {member} in struct {name}"))
    }

    /// The offset of the first of `members` that exists.
    pub fn offset_any(&self, name: &str, members: &[&str]) -> Result<u32> {
        members
            .iter()
            .find_map(|m| self.offset(name, m).ok())
            .ok_or_else(|| anyhow!("struct {name} has none of {members:?}"))
    }

    fn find(&self, s: &btf_rs::Struct, wanted: &str) -> Result<Option<u32>> {
        for m in &s.members {
            let bit_offset = m.bit_offset();
            if bit_offset % 8 != 0 {
                continue;
            }
            let name = self.btf.resolve_name(m).unwrap_or_default();
            if name == wanted {
                return Ok(Some(bit_offset / 8));
            }
            if name.is_empty() {
                let inner = self.resolve_aggregate(m)?;
                if let Some(inner) = inner
                    && let Some(off) = self.find(&inner, wanted)?
                {
                    return Ok(Some(bit_offset / 8 + off));
                }
            }
        }
        Ok(None)
    }

    fn resolve_aggregate(&self, m: &btf_rs::Member) -> Result<Option<btf_rs::Struct>> {
        let mut ty = self.btf.resolve_chained_type(m).context("member type")?;
        loop {
            match ty {
                Type::Struct(s) | Type::Union(s) => return Ok(Some(s)),
                Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) => {
                    let inner = ty.as_btf_type().ok_or_else(|| anyhow!("untyped member"))?;
                    ty = self.btf.resolve_chained_type(inner)?;
                }
                _ => return Ok(None),
            }
        }
    }

    pub fn enum_value(&self, enum_name: &str, member: &str) -> Result<u64> {
        for t in self
            .btf
            .resolve_types_by_name(enum_name)
            .map_err(|e| anyhow!("enum {enum_name}: {e}"))?
        {
            if let Type::Enum(e) = t {
                for m in &e.members {
                    if self.btf.resolve_name(m).ok().as_deref() == Some(member) {
                        return Ok(m.val() as u64);
                    }
                }
            }
        }
        bail!("no {member} in enum {enum_name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Runs against the machine's own kernel BTF: these structs exist on every kernel we support.
    #[test]
    fn finds_nested_and_plain_members() {
        let btf = KernelBtf::load().expect("kernel BTF at /sys/kernel/btf/vmlinux");
        let tgid = btf.offset("task_struct", "tgid").unwrap();
        let pid = btf.offset("task_struct", "pid").unwrap();
        assert_eq!(tgid, pid + 4, "pid and tgid are adjacent pid_t fields");
        assert!(btf.offset("address_space", "host").is_ok());
        // folio->_nr_pages (6.x) lives in an anonymous struct inside an anonymous union.
        let nr = btf
            .offset_any("folio", &["_nr_pages", "_folio_nr_pages"])
            .unwrap();
        assert!(
            nr >= 32,
            "large-folio page count sits past the first page's fields"
        );
        let head = btf.enum_value("pageflags", "PG_head").unwrap();
        assert!(head < 64);
        assert!(btf.offset("task_struct", "no_such_member").is_err());
    }
}
