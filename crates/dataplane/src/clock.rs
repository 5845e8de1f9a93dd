//! The server's clock: `std::time::Instant` converted to the cores' [`Instant`] at the edge.
//!
//! Cores never read a clock (they take `now`); the server's threads share one [`Clock`] so every
//! `now` they pass is on the same timeline, starting near zero when the server starts.

use isochron_base::Instant;

/// A monotonic clock whose epoch is its creation.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    /// A clock starting now.
    #[must_use]
    pub fn new() -> Self {
        Self { origin: std::time::Instant::now() }
    }

    /// The current time.
    #[must_use]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
