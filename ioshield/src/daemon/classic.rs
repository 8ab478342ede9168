//! prometheus-client writes only OpenMetrics, but node_exporter's textfile collector (and any
//! scraper that gets `text/plain; version=0.0.4`) reads the classic Prometheus text format. The
//! two differ, for what ioshield exports, in three ways this undoes: the `# EOF` marker, `# UNIT`
//! lines, and counters, whose TYPE and HELP lines name the family (`x`) in OpenMetrics but must
//! name the sample (`x_total`) in the classic format, or the samples become untyped strangers.

/// The classic text format's Content-Type, for what [`from_openmetrics`] returns.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn from_openmetrics(text: &str) -> String {
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta.and_then(|(p, rest)| Some((p, rest.split_once(' ')?))) {
            Some((p, (name, rest))) if counters.contains(name) => {
                out.push_str(&format!("{p}{name}_total {rest}"));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_by_their_samples_and_the_eof_goes() {
        let om = "# HELP x_bytes Bytes.\n# TYPE x_bytes counter\n# UNIT x_bytes bytes\n\
                  x_bytes_total{device=\"sda\"} 1\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP x_bytes_total Bytes.\n# TYPE x_bytes_total counter\n\
             x_bytes_total{device=\"sda\"} 1\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n"
        );
    }
}
