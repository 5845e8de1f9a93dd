//! Wrong credentials slow down whoever sends them: per client address and per user name, so
//! that guessing a password online costs time whether it comes from one address or is spread
//! over users (OWASP's "Blocking Brute Force Attacks": delay rather than lock out, since a
//! lockout is a denial of service for the real user).
//!
//! The first [`FREE`] wrong answers in a row cost nothing (typos, a client answering an old
//! challenge); each one after waits twice as long as the one before, from [`BASE_MS`] up to
//! [`CAP_MS`]. Requests take turns: each request with credentials reserves its slot before it is
//! checked ([`Throttle::admit`]), so a burst over many connections is checked one slot at a time
//! rather than all at once. A right answer clears the address and the user; an entry quiet for
//! [`FORGET_MS`] is forgotten. Sans-IO: the caller passes the time and does the waiting.

use std::collections::HashMap;
use std::net::IpAddr;

/// Wrong answers in a row that cost nothing.
pub const FREE: u32 = 3;
/// The wait after the first costly wrong answer, ms.
pub const BASE_MS: u64 = 100;
/// The longest wait, ms.
pub const CAP_MS: u64 = 1_000;
/// An entry quiet this long is forgotten, ms.
pub const FORGET_MS: u64 = 15 * 60 * 1_000;
/// Entries kept before the quiet ones are pruned.
const PRUNE_AT: usize = 10_000;

/// The keys a request with credentials is throttled by: its client's address, and the user it
/// names.
#[must_use]
pub fn keys(client: IpAddr, user: Option<&str>) -> Vec<String> {
    let mut keys = vec![format!("addr {client}")];
    if let Some(u) = user {
        keys.push(format!("user {u}"));
    }
    keys
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// Wrong answers in a row.
    fails: u32,
    /// The earliest the next request may be checked, ms.
    next_ms: u64,
    /// The last wrong answer, ms.
    last_ms: u64,
}

impl Entry {
    fn delay_ms(&self) -> u64 {
        match self.fails.checked_sub(FREE + 1) {
            None => 0,
            Some(n) => BASE_MS.saturating_mul(1u64 << n.min(20)).min(CAP_MS),
        }
    }
}

/// Wrong answers by key (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Throttle {
    entries: HashMap<String, Entry>,
}

impl Throttle {
    /// A request with credentials under `keys` at `now_ms`: how long it must wait before it is
    /// checked (the longest of its keys'), its slot taken.
    pub fn admit(&mut self, keys: &[String], now_ms: u64) -> u64 {
        let mut wait = 0;
        for k in keys {
            let Some(e) = self.entries.get_mut(k) else { continue };
            let slot = e.next_ms.max(now_ms);
            wait = wait.max(slot - now_ms);
            e.next_ms = slot + e.delay_ms();
        }
        wait
    }

    /// A wrong answer under `keys` at `now_ms`: returns the most wrong answers in a row of any
    /// of its keys.
    pub fn failed(&mut self, keys: &[String], now_ms: u64) -> u32 {
        if self.entries.len() >= PRUNE_AT {
            self.entries.retain(|_, e| now_ms.saturating_sub(e.last_ms) < FORGET_MS);
        }
        let mut most = 0;
        for k in keys {
            let e = self.entries.entry(k.clone()).or_default();
            if now_ms.saturating_sub(e.last_ms) >= FORGET_MS {
                *e = Entry::default();
            }
            e.fails += 1;
            e.last_ms = now_ms;
            e.next_ms = e.next_ms.max(now_ms + e.delay_ms());
            most = most.max(e.fails);
        }
        most
    }

    /// A right answer under `keys`: they start afresh.
    pub fn succeeded(&mut self, keys: &[String]) {
        for k in keys {
            self.entries.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_answers_cost_more_and_more_up_to_the_cap() {
        let mut t = Throttle::default();
        let k = keys("10.0.0.9".parse().unwrap(), Some("ops"));
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..12 {
            let w = t.admit(&k, now);
            waits.push(w);
            now += w;
            t.failed(&k, now);
        }
        assert_eq!(waits, [0, 0, 0, 0, 100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        // 2,000 wrong answers take well over a minute.
        let (mut now, mut t) = (0, Throttle::default());
        for _ in 0..2000 {
            now += t.admit(&k, now);
            t.failed(&k, now);
        }
        assert!(now > 60_000 * 30, "{now} ms");
    }

    #[test]
    fn a_burst_takes_turns_and_a_right_answer_clears() {
        let mut t = Throttle::default();
        let k = keys("10.0.0.9".parse().unwrap(), None);
        for _ in 0..5 {
            t.failed(&k, 0);
        }
        // Five requests at once (five connections): one slot each, 200 ms apart.
        let waits: Vec<u64> = (0..5).map(|_| t.admit(&k, 0)).collect();
        assert_eq!(waits, [200, 400, 600, 800, 1000]);
        t.succeeded(&k);
        assert_eq!(t.admit(&k, 0), 0);
        // Another address, the same user: the user's key slows it too.
        let user = keys("10.0.0.1".parse().unwrap(), Some("ops"));
        for _ in 0..6 {
            t.failed(&user, 0);
        }
        let elsewhere = keys("10.0.0.2".parse().unwrap(), Some("ops"));
        assert!(t.admit(&elsewhere, 0) > 0);
        // Quiet for long enough, it is forgotten.
        assert_eq!(t.failed(&user, FORGET_MS + 1), 1);
    }
}
