//! A live feed per trial: the bench's publisher.
//!
//! A live presentation exists while a publisher sends it (RFC 2326 §10.11 RECORD, or SRT), and
//! its viewers' load is the number of viewers of one feed. To measure a server's N_max of live
//! viewers the way [`super::run()`] measures VOD (trials of fixed N, each played whole), every
//! trial publishes a feed of its own with a command the operator gives (`ffmpeg -re … -f
//! mpegts srt://…`, `ffmpeg -re … -f rtsp rtsp://…`), waits until the server describes it,
//! and starts its N viewers at its start; they watch it to its end (the server's RTCP BYE,
//! RFC 3550 §6.6). `{trial}` in the command and in the URLs becomes the trial's number, so
//! that each trial's feed (and its recording) has a name of its own.
//!
//! Not here: the trials themselves, the clients.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tracing::{info, warn};

use crate::client::Client;

/// How long a feed may take to be described after its publisher starts.
const LIVE_WAIT: Duration = Duration::from_secs(20);
/// The lines of the publisher's stderr kept for the log when it fails.
const STDERR_LINES: usize = 20;

/// `template` with `{trial}` replaced by `trial`.
#[must_use]
pub fn for_trial(template: &str, trial: u32) -> String {
    template.replace("{trial}", &trial.to_string())
}

/// A running publisher: its process (killed when dropped) and the end of its stderr.
pub struct Publisher {
    child: Child,
    command: String,
    stderr: Arc<Mutex<VecDeque<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    exited: bool,
}

impl Publisher {
    /// Starts `sh -c command`, its stdin closed, its stdout discarded, its stderr kept.
    ///
    /// # Errors
    /// When the shell cannot be started.
    pub fn start(command: &str) -> anyhow::Result<Self> {
        let mut child = Command::new("sh")
            .args(["-c", command])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the publisher: sh -c {command:?}"))?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let reader = child.stderr.take().map(|pipe| {
            let keep = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut k = keep.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if k.len() == STDERR_LINES {
                        k.pop_front();
                    }
                    k.push_back(line);
                }
            })
        });
        info!(command, "publisher started");
        Ok(Self { child, command: command.to_owned(), stderr, reader, exited: false })
    }

    /// Waits until `url` is described (the feed is live); fails when the publisher exits first
    /// or after 20 s.
    ///
    /// # Errors
    /// The publisher ended, or the feed was not described in time (the last DESCRIBE's error).
    pub async fn wait_live(&mut self, url: &str) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        loop {
            let tried = async {
                let mut c = Client::connect(url).await?;
                c.describe_presentation().await
            };
            let err = match tokio::time::timeout(Duration::from_secs(2), tried).await {
                Ok(Ok(_)) => return Ok(t0.elapsed()),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "DESCRIBE timed out".to_owned(),
            };
            if self.exited() {
                bail!("the publisher ended before {url} was live ({err}): {}", self.stderr_tail());
            }
            if t0.elapsed() > LIVE_WAIT {
                bail!("{url} was not live {LIVE_WAIT:?} after the publisher started: {err}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether the publisher has exited (the feed is over); a failure is logged with its
    /// stderr once.
    pub fn exited(&mut self) -> bool {
        if self.exited {
            return true;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = true;
                // Its stderr closed with it: let the reader take the last lines (a child it
                // left behind may hold the pipe, hence the bound).
                let t0 = Instant::now();
                while self.reader.as_ref().is_some_and(|r| !r.is_finished())
                    && t0.elapsed() < Duration::from_millis(500)
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if !status.success() {
                    warn!(command = self.command, %status, stderr = self.stderr_tail(),
                        "the publisher failed");
                }
                true
            }
            Ok(None) => false,
            Err(_) => {
                self.exited = true;
                true
            }
        }
    }

    fn stderr_tail(&self) -> String {
        let k = self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        k.iter().cloned().collect::<Vec<_>>().join(" | ")
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if !self.exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trial_names_its_own_feed() {
        assert_eq!(
            for_trial("ffmpeg -f mpegts 'srt://h:1?streamid=publish:live{trial}'", 7),
            "ffmpeg -f mpegts 'srt://h:1?streamid=publish:live7'"
        );
        assert_eq!(for_trial("rtsp://h/cam", 3), "rtsp://h/cam");
    }

    #[tokio::test]
    async fn a_publisher_that_ends_before_its_feed_is_live_says_why() {
        let mut p = Publisher::start("echo 'no such clip' >&2; exit 3").expect("sh");
        let err = p.wait_live("rtsp://127.0.0.1:9/none").await.expect_err("never live");
        let msg = format!("{err:#}");
        assert!(msg.contains("ended before") && msg.contains("no such clip"), "{msg}");
    }
}
