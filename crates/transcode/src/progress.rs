//! `ffmpeg -progress` output: blocks of `key=value` lines, each block ended by
//! `progress=continue` (or `progress=end` at the end), about twice a second.

use std::time::Duration;

/// Turns `ffmpeg -progress` lines into how far along the output is.
#[derive(Clone, Debug, Default)]
pub struct ProgressParser {
    out_time: Duration,
    ended: bool,
}

impl ProgressParser {
    /// A parser at time zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one line. Returns the output time reached when the line ends a block.
    pub fn handle_line(&mut self, line: &str) -> Option<Duration> {
        let (key, value) = line.trim().split_once('=')?;
        match key {
            // `out_time_ms` is microseconds too (an ffmpeg misnomer); `out_time_us` is the
            // one to read. A negative or "N/A" value (before the first frame) is skipped.
            "out_time_us" => {
                if let Ok(us) = value.parse::<u64>() {
                    self.out_time = Duration::from_micros(us);
                }
                None
            }
            "progress" => {
                self.ended |= value == "end";
                Some(self.out_time)
            }
            _ => None,
        }
    }

    /// Whether ffmpeg said `progress=end`.
    #[must_use]
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The output time reached so far.
    #[must_use]
    pub fn out_time(&self) -> Duration {
        self.out_time
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_blocks() {
        let mut p = ProgressParser::new();
        let text = "frame=10\nout_time_us=N/A\nprogress=continue\n\
                    out_time_us=1500000\nout_time_ms=1500000\nspeed=1x\nprogress=continue\n\
                    out_time_us=20010667\nprogress=end\n";
        let got: Vec<_> = text.lines().filter_map(|l| p.handle_line(l)).collect();
        assert_eq!(
            got,
            [Duration::ZERO, Duration::from_millis(1500), Duration::from_micros(20_010_667)]
        );
        assert!(p.ended());
    }
}
