//! The server's own counters, scraped from a Prometheus text endpoint (exposition format 0.0.4)
//! such as isochron's `/metrics`: Yima's B_disk and B_cache (`isochron_disk_bytes_total`,
//! `isochron_cache_bytes_total`), admission rejects, missed deadlines, packets sent, pace
//! changes. The bench works against any server; these columns stay empty without `--metrics`.
//!
//! Not here: the HTTP request (the runner does it off the async threads).

use std::collections::HashMap;

/// Parses Prometheus text: each metric's value, summed over its label sets — except a
/// histogram's buckets, kept apart by their bound (`name{le="0.05"}`). Comments, blank lines
/// and malformed lines are skipped.
#[must_use]
pub fn parse(text: &str) -> HashMap<String, f64> {
    let mut out: HashMap<String, f64> = HashMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // `name{labels} value [timestamp]`; label values may hold spaces.
        let (name, rest) = match line.find('{') {
            Some(i) => match line[i..].find('}') {
                Some(j) => {
                    let le =
                        line[i + 1..i + j].split(',').find_map(|l| l.trim().strip_prefix("le="));
                    let value = &line[i + j + 1..];
                    match le.filter(|_| line[..i].ends_with("_bucket")) {
                        Some(le) => {
                            let key = format!("{}{{le={}}}", line[..i].trim(), le);
                            if let Some(v) =
                                value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok())
                            {
                                *out.entry(key).or_default() += v;
                            }
                            continue;
                        }
                        None => (&line[..i], value),
                    }
                }
                None => continue,
            },
            None => match line.split_once(char::is_whitespace) {
                Some((n, r)) => (n, r),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *out.entry(name.trim().to_string()).or_default() += value;
    }
    out
}

/// The isochron counters the bench samples, in the order of the samples' columns.
pub const ISOCHRON_COUNTERS: [&str; 9] = [
    "isochron_disk_bytes_total",
    "isochron_cache_bytes_total",
    "isochron_admission_rejects_total",
    "isochron_missed_deadlines_total",
    "isochron_packets_sent_total",
    "isochron_pace_changes_total",
    "isochron_underruns_total",
    LATENESS_COUNT,
    LATENESS_WITHIN_50MS,
];

/// Packets the server sent (its lateness histogram's count).
pub const LATENESS_COUNT: &str = "isochron_packet_lateness_seconds_count";
/// Packets the server sent at most 50 ms past their send times.
pub const LATENESS_WITHIN_50MS: &str = "isochron_packet_lateness_seconds_bucket{le=\"0.05\"}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values_and_sums_label_sets() {
        let text = "# HELP isochron_disk_bytes_total Block bytes.\n\
                    # TYPE isochron_disk_bytes_total counter\n\
                    isochron_disk_bytes_total 1.048576e6\n\
                    isochron_sessions 3\n\
                    isochron_disk_queue_depth{disk=\"d 0\"} 2\n\
                    isochron_disk_queue_depth{disk=\"d1\"} 5 1700000000\n\
                    isochron_packet_lateness_seconds_bucket{le=\"0.05\"} 90\n\
                    isochron_packet_lateness_seconds_bucket{le=\"+Inf\"} 100\n\
                    broken_line\n\
                    bad_value{a=\"b\"} x\n\n";
        let m = parse(text);
        assert_eq!(m["isochron_disk_bytes_total"], 1_048_576.0);
        assert_eq!(m["isochron_sessions"], 3.0);
        assert_eq!(m["isochron_disk_queue_depth"], 7.0);
        assert_eq!(m[LATENESS_WITHIN_50MS], 90.0);
        assert_eq!(m["isochron_packet_lateness_seconds_bucket{le=\"+Inf\"}"], 100.0);
        assert_eq!(m.len(), 5);
    }
}
