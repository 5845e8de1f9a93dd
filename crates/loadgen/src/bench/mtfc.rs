//! MTFC: multi-threshold flow control, the client side of Yima's rate smoothing (Yima §2.5;
//! patent US 6,910,079; the rate rule and its parameters are ours: `docs/design/mtfc.md`).
//!
//! The client samples its buffer level; the thresholds are an underflow one, an overflow one and
//! `K` equally spaced in between. When the level crosses one between two samples, the client
//! computes a new server rate from the distance to its target level and sends it (RTSP
//! SET_PARAMETER `x-isochron-rate`, see `isochron_rtsp::server::RATE_PARAMETER`). Crossing the
//! underflow threshold downwards asks for the maximum rate; crossing the overflow threshold
//! upwards asks for the minimum.
//!
//! Our choice of units: the level is *media time* buffered (see [`super::playout`]), and a rate is
//! a multiplier of the stream's own pace ([`Pace`]), because isochron paces by the PCR. The
//! predicted consumption `Ĉ` in the rule `R = Ĉ + (b* − b)/τ` is then exactly one media second per
//! second while playing, for VBR as for CBR, so `R = clamp(1 + (b* − b)/τ, R_min, R_max)`.
//! Hysteresis: a threshold that fired is re-armed only once the level has moved half a threshold
//! spacing away from it; a change smaller than `ε` of the current rate, or sooner than `g` after
//! the last one, is not sent (the crossing is then kept pending).
//!
//! A request may carry the player's buffer too (`x-isochron-buffer`, [`Mtfc::buffer_level`]):
//! isochron's server chooses a title's rendition from it (adaptive bit rate).
//!
//! Not here: sending, and noticing a server that refuses (the session controller).

use std::time::{Duration, Instant};

use isochron_base::Pace;
use isochron_rtsp::server::BufferLevel;

use super::playout::PlayState;

/// MTFC parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MtfcConfig {
    /// Target level `b*`.
    pub target: Duration,
    /// Buffer capacity `B`: thresholds lie between 10 % and 90 % of it.
    pub capacity: Duration,
    /// Intermediate thresholds `K`.
    pub thresholds: u32,
    /// Convergence time `τ`.
    pub tau: Duration,
    /// Smallest relative change sent, `ε`.
    pub epsilon: f64,
    /// Smallest gap between two requests, `g`.
    pub min_gap: Duration,
    /// Slowest pace asked for.
    pub min_pace: Pace,
    /// Fastest pace asked for.
    pub max_pace: Pace,
    /// Whether it steers while its buffer fills before playback (after a start, a seek or a
    /// loop): content pacing's client asks for its fastest pace then, to start sooner.
    pub steer_while_filling: bool,
}

impl MtfcConfig {
    /// The values of `docs/design/mtfc.md` for a player whose playout depth is `depth`: target
    /// = depth, capacity = 2 × depth, `K` thresholds, τ = 3 s, ε = 3 %, g = 200 ms, pace 0.5–1.5.
    #[must_use]
    pub fn for_depth(depth: Duration, thresholds: u32) -> Self {
        Self {
            target: depth,
            capacity: depth * 2,
            thresholds,
            tau: Duration::from_secs(3),
            epsilon: 0.03,
            min_gap: Duration::from_millis(200),
            min_pace: Pace::from_ppm(500_000),
            max_pace: Pace::from_ppm(1_500_000),
            steer_while_filling: true,
        }
    }
}

impl MtfcConfig {
    /// The same for a session the server paces by bytes at its object's mean rate
    /// (`x-isochron-pacing: rate`), with τ = 10 × depth. The server keeps each packet within a
    /// window of its own time (500 ms by default, a quarter of a 2 s depth), so the level
    /// swings that much around the target by design: that is the VBR the buffer absorbs, and
    /// chasing it would put the bursts back on the network. With τ = 10 × depth a swing of a
    /// quarter of the depth asks for 2.5 %, less than ε; only a drift past it (a pace that
    /// does not match the content over tens of seconds) moves the rate, and the underflow and
    /// overflow thresholds still ask for the extremes. It does not steer while its buffer
    /// fills before playback: it fills at the object's mean rate, as a standard player at the
    /// nominal pace does, so that a start, a seek or a loop adds no burst to the network's
    /// traffic (asking for 1.5 × to start sooner did, one per loop of every client).
    #[must_use]
    pub fn for_rate_pacing(depth: Duration, thresholds: u32) -> Self {
        let base = Self::for_depth(depth, thresholds);
        Self { tau: depth * 10, steer_while_filling: false, ..base }
    }
}

/// The MTFC state of one client.
#[derive(Clone, Debug)]
pub struct Mtfc {
    config: MtfcConfig,
    /// Threshold levels (ns), ascending: underflow, K intermediate, overflow.
    levels: Vec<u64>,
    armed: Vec<bool>,
    prev: Option<u64>,
    current: Pace,
    last_sent: Option<Instant>,
}

impl Mtfc {
    /// A client at nominal pace.
    #[must_use]
    pub fn new(config: MtfcConfig) -> Self {
        let cap = config.capacity.as_nanos() as f64;
        let (under, over) = (0.1 * cap, 0.9 * cap);
        let k = config.thresholds;
        let step = (over - under) / f64::from(k + 1);
        let levels: Vec<u64> = (0..=k + 1).map(|i| (under + step * f64::from(i)) as u64).collect();
        let armed = vec![true; levels.len()];
        Self { config, levels, armed, prev: None, current: Pace::NOMINAL, last_sent: None }
    }

    /// Its parameters.
    #[must_use]
    pub fn config(&self) -> &MtfcConfig {
        &self.config
    }

    /// The pace last asked for.
    #[must_use]
    pub fn current(&self) -> Pace {
        self.current
    }

    /// The threshold levels, ascending.
    #[must_use]
    pub fn levels(&self) -> Vec<Duration> {
        self.levels.iter().map(|l| Duration::from_nanos(*l)).collect()
    }

    /// The rate MTFC asks for at `level` (no thresholds, no hysteresis): the formula alone.
    #[must_use]
    pub fn rate_for(&self, level: Duration) -> Pace {
        let c = &self.config;
        let error = c.target.as_secs_f64() - level.as_secs_f64();
        let r = 1.0 + error / c.tau.as_secs_f64().max(1e-3);
        let r = r.clamp(c.min_pace.as_f64(), c.max_pace.as_f64());
        Pace::from_multiplier(r).unwrap_or(Pace::NOMINAL)
    }

    /// What a request says of the player's buffer in state `state` holding `level`
    /// (`x-isochron-buffer`): the level against the depth MTFC keeps it at, once the player
    /// plays. A buffer filling before the first frame (or after a seek) says nothing of the path.
    #[must_use]
    pub fn buffer_level(&self, state: PlayState, level: Duration) -> Option<BufferLevel> {
        matches!(state, PlayState::Playing { .. } | PlayState::Stalled { .. })
            .then_some(BufferLevel { level, depth: self.config.target })
    }

    /// A buffer sample at `now`. Returns the pace to send to the server, if any.
    pub fn handle_level(&mut self, now: Instant, level: Duration) -> Option<Pace> {
        let b = level.as_nanos() as u64;
        let half_gap = (self.levels[1] - self.levels[0]) / 2;
        for (l, armed) in self.levels.iter().zip(self.armed.iter_mut()) {
            if !*armed && b.abs_diff(*l) >= half_gap {
                *armed = true;
            }
        }
        let Some(prev) = self.prev else {
            self.prev = Some(b);
            return None;
        };
        let (lo, hi) = (prev.min(b), prev.max(b));
        // The armed threshold crossed between the two samples that lies nearest to `b`.
        let crossed = (0..self.levels.len())
            .filter(|&i| self.armed[i] && lo < self.levels[i] && self.levels[i] <= hi)
            .min_by_key(|&i| self.levels[i].abs_diff(b));
        let Some(i) = crossed else {
            self.prev = Some(b);
            return None;
        };
        if self.last_sent.is_some_and(|t| now.saturating_duration_since(t) < self.config.min_gap) {
            return None; // keep `prev`: the crossing is seen again at the next sample
        }
        self.prev = Some(b);
        self.armed[i] = false;
        let falling = b < prev;
        let rate = if i == 0 && falling {
            self.config.max_pace
        } else if i == self.levels.len() - 1 && !falling {
            self.config.min_pace
        } else {
            self.rate_for(level)
        };
        let change = (rate.as_f64() - self.current.as_f64()).abs() / self.current.as_f64();
        if change < self.config.epsilon {
            return None;
        }
        self.current = rate;
        self.last_sent = Some(now);
        Some(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn mtfc() -> Mtfc {
        // Depth 2 s: capacity 4 s, thresholds 0.4 s … 3.6 s, K = 7 → spacing 0.4 s.
        Mtfc::new(MtfcConfig::for_depth(ms(2_000), 7))
    }

    #[test]
    fn thresholds_are_evenly_spaced_between_under_and_overflow() {
        let m = mtfc();
        let l: Vec<u64> = m.levels().iter().map(|d| d.as_millis() as u64).collect();
        assert_eq!(l, vec![400, 800, 1200, 1600, 2000, 2400, 2800, 3200, 3600]);
    }

    #[test]
    fn no_request_without_a_crossing() {
        let mut m = mtfc();
        let t0 = Instant::now();
        assert_eq!(m.handle_level(t0, ms(1_900)), None);
        for i in 1..50 {
            // Wobbling between 1.85 and 1.95 s crosses nothing.
            let level = if i % 2 == 0 { 1_850 } else { 1_950 };
            assert_eq!(m.handle_level(t0 + ms(i * 100), ms(level)), None);
        }
        assert_eq!(m.current(), Pace::NOMINAL);
    }

    #[test]
    fn falling_level_speeds_up_and_underflow_asks_for_the_maximum() {
        let mut m = mtfc();
        let t0 = Instant::now();
        m.handle_level(t0, ms(1_700));
        // 1.5 s: crossed 1.6 s; R = 1 + 0.5/3.
        let r = m.handle_level(t0 + ms(1_000), ms(1_500)).unwrap();
        assert_eq!(r.ppm(), 1_166_667);
        // 0.3 s: crossed 1.2, 0.8 and 0.4 s, the underflow threshold is the nearest: maximum.
        let r = m.handle_level(t0 + ms(2_000), ms(300)).unwrap();
        assert_eq!(r, Pace::from_ppm(1_500_000));
        // Rising back over 0.4 s right away: that threshold is not re-armed yet (hysteresis)…
        assert_eq!(m.handle_level(t0 + ms(3_000), ms(500)), None);
        // …and crossing 0.8 s up to 0.9 s gives 1 + 1.1/3.
        let r = m.handle_level(t0 + ms(4_000), ms(900)).unwrap();
        assert_eq!(r.ppm(), 1_366_667);
    }

    #[test]
    fn overflow_asks_for_the_minimum_and_the_gap_defers_a_request() {
        let mut m = mtfc();
        let t0 = Instant::now();
        m.handle_level(t0, ms(3_500));
        let r = m.handle_level(t0 + ms(1_000), ms(3_700)).unwrap();
        assert_eq!(r, Pace::from_ppm(500_000));
        // 100 ms later the level falls across 3.2 s: too soon (g = 200 ms), kept pending …
        assert_eq!(m.handle_level(t0 + ms(1_100), ms(3_100)), None);
        // … and sent at the next sample.
        let r = m.handle_level(t0 + ms(1_300), ms(3_100)).unwrap();
        assert_eq!(r, Pace::from_ppm(633_333));
    }

    #[test]
    fn a_higher_level_never_asks_for_a_higher_rate() {
        let m = mtfc();
        let mut last = u32::MAX;
        for level in (0..=4_000).step_by(50) {
            let r = m.rate_for(ms(level)).ppm();
            assert!(r <= last, "{level} ms: {r} > {last}");
            last = r;
        }
    }

    #[test]
    fn more_thresholds_send_more_often_for_the_same_drift() {
        let count = |k| {
            let mut m = Mtfc::new(MtfcConfig::for_depth(ms(2_000), k));
            let t0 = Instant::now();
            (0..=40u64)
                .filter(|i| m.handle_level(t0 + ms(i * 500), ms(2_000 - i * 40)).is_some())
                .count()
        };
        assert!(count(15) > count(3), "{} vs {}", count(15), count(3));
    }
}
