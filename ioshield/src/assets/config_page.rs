//! `ioshield.toml(5)`, made from the commented default configuration the packages install, so
//! the page and the file cannot say different things. The file's header becomes the description,
//! each `[section]` a subsection, each key (set or commented out) an entry with its default and
//! the comment lines above it; a comment ending in "For example:" starts an example block.

/// The default configuration as shipped in `/etc/ioshield/ioshield.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("../../../packaging/ioshield.toml");

/// Text as roff prints it: backslashes doubled, and a line starting with `.` or `'` (a roff
/// control character) guarded.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}")
    } else {
        text
    }
}

/// `key = value`, bare or commented out (`# key = value`), as a key of the page.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let body = line.strip_prefix('#').map_or(line, str::trim_start);
    let (key, value) = body.split_once(" = ")?;
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    plain.then_some((key, value.trim()))
}

/// `[section]`, bare or commented out.
fn section_line(line: &str) -> Option<&str> {
    let body = line.strip_prefix('#').map_or(line, str::trim_start);
    (body.starts_with('[') && body.ends_with(']')).then_some(body)
}

pub fn render(version: &str) -> String {
    let mut out = format!(
        ".TH IOSHIELD.TOML 5 \"\" \"ioshield {version}\" \"File Formats\"\n\
         .SH NAME\n\
         ioshield.toml \\- configuration of the ioshield daemon\n\
         .SH SYNOPSIS\n\
         /etc/ioshield/ioshield.toml\n\
         .br\n\
         /etc/ioshield/ioshield.toml.d/*.toml\n\
         .SH DESCRIPTION\n"
    );
    let mut lines = DEFAULT_CONFIG.lines().peekable();
    // The header: comment lines up to the first section.
    let mut in_code = false;
    while let Some(line) = lines.next_if(|l| !l.starts_with('[')) {
        let text = line.strip_prefix('#').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let code = text.starts_with("     ");
        if code != in_code {
            out.push_str(if code {
                ".PP\n.nf\n.RS 4\n"
            } else {
                ".RE\n.fi\n"
            });
            in_code = code;
        }
        match text.trim() {
            "" if !in_code => out.push_str(".PP\n"),
            t => {
                out.push_str(&escape(t));
                out.push('\n');
            }
        }
    }
    if in_code {
        out.push_str(".RE\n.fi\n");
    }
    out.push_str(".SH KEYS\n");
    let mut pending: Vec<String> = Vec::new();
    let mut example = false;
    let mut seen: Vec<String> = Vec::new();
    for line in lines {
        if line.trim().is_empty() {
            if example {
                out.push_str(".RE\n.fi\n");
                example = false;
            }
            continue;
        }
        if example {
            out.push_str(&escape(line.trim_start_matches('#').trim_start()));
            out.push('\n');
            continue;
        }
        if let Some(section) = section_line(line) {
            out.push_str(&format!(".SS \"{}\"\n", escape(section)));
            flush_text(&mut out, &mut pending);
            seen.clear();
            continue;
        }
        if let Some((key, value)) = key_line(line) {
            if !seen.iter().any(|k| k == key) {
                seen.push(key.to_string());
                let shown = if line.starts_with('#') {
                    format!("(not set; e.g. {value})")
                } else {
                    format!("(default: {value})")
                };
                out.push_str(&format!(
                    ".TP\n\\fB{}\\fR {}\n",
                    escape(key),
                    escape(&shown)
                ));
                flush_text(&mut out, &mut pending);
            }
            continue;
        }
        let text = line.trim_start_matches('#');
        let text = text.strip_prefix(' ').unwrap_or(text);
        if text.trim_end().ends_with("For example:") {
            pending.push(text.to_string());
            flush_text(&mut out, &mut pending);
            out.push_str(".PP\n.nf\n.RS 4\n");
            example = true;
            continue;
        }
        pending.push(text.to_string());
    }
    if example {
        out.push_str(".RE\n.fi\n");
    }
    flush_text(&mut out, &mut pending);
    out.push_str(
        ".SH FILES\n\
         .TP\n/etc/ioshield/ioshield.toml\n\
         The configuration file (a conffile of the package; every key at its default).\n\
         .TP\n/etc/ioshield/ioshield.toml.d/*.toml\n\
         Drop-in files, read after the main file in name order: a key they set replaces the \
         earlier value, lists under [exclude] add up, and a [device.NAME] section changes only \
         the keys it sets.\n\
         .SH SEE ALSO\n\
         \\fBioshield\\fR(8), \\fBioshield\\-daemon\\fR(8), \\fBioshield\\-check\\-config\\fR(8)\n",
    );
    out
}

/// Comment lines gathered before an entry or a section: its description. Indented lines (lists
/// of choices) keep their line breaks.
fn flush_text(out: &mut String, pending: &mut Vec<String>) {
    let mut in_list = false;
    for line in pending.drain(..) {
        let list = line.starts_with("  ");
        if list && !in_list {
            out.push_str(".nf\n");
        } else if !list && in_list {
            out.push_str(".fi\n");
        }
        in_list = list;
        if line.trim().is_empty() {
            out.push_str(".IP\n");
        } else {
            out.push_str(&escape(if list { &line } else { line.trim() }));
            out.push('\n');
        }
    }
    if in_list {
        out.push_str(".fi\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_the_default_file_has_an_entry() {
        let page = render("0");
        for line in DEFAULT_CONFIG.lines() {
            if let Some((key, _)) = key_line(line) {
                assert!(
                    page.contains(&format!("\\fB{}\\fR", escape(key))),
                    "{key} has no entry"
                );
            }
        }
        assert!(page.contains(".SS \"[device.default]\""));
        assert!(page.contains(".SS \"[metrics]\""));
        // Example lines are shown as they are, not as entries of their own.
        assert!(page.contains("comm = [\"sshd\", \"postgres\"]"));
        assert_eq!(page.matches("\\fBcomm\\fR").count(), 1);
    }

    #[test]
    fn roff_control_characters_are_escaped() {
        assert_eq!(escape(".prom"), "\\&.prom");
        assert_eq!(escape("a\\b-c"), "a\\eb\\-c");
    }
}
