//! Which key a position in the file belongs to. TOML's own errors (a string where a number
//! belongs, an unknown key) carry a position but not the key path, and a message that says
//! `device."/dev/vdb".hold` is one a person can act on without counting lines.
use toml::de::{DeTable, DeValue};

/// The dotted key path (`daemon.tick`, `device."/dev/vdb".hold`) whose key or value covers byte
/// `pos` of `text`; `None` when the text is not TOML at all or `pos` is outside every key.
pub fn key_at(text: &str, pos: usize) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find(doc.get_ref(), pos, &mut path).then(|| path.join("."))
}

fn find(table: &DeTable, pos: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        path.push(segment(key.get_ref()));
        // A `[section]`'s value span need not cover its keys, so look inside tables anyway.
        let inside = match value.get_ref() {
            DeValue::Table(t) => find(t, pos, path),
            _ => false,
        };
        if inside || key.span().contains(&pos) || value.span().contains(&pos) {
            return true;
        }
        path.pop();
    }
    false
}

/// A key as it would be written: bare when TOML allows it, quoted otherwise.
pub fn segment(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_map_to_dotted_paths() {
        let text = "[daemon]\ntick = \"1s\"\n[device.\"/dev/vdb\"]\nhold = 3\n[exclude]\n\
                    comm = [\"a\", 5]\n";
        let at = |needle: &str| key_at(text, text.find(needle).unwrap());
        assert_eq!(at("\"1s\"").as_deref(), Some("daemon.tick"));
        assert_eq!(at("3\n").as_deref(), Some("device.\"/dev/vdb\".hold"));
        assert_eq!(at("5]").as_deref(), Some("exclude.comm"));
        assert_eq!(key_at("tick = = 1", 7), None);
    }
}
