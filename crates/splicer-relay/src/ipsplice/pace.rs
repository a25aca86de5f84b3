//! Pacing an `ipsplice` tunnel: its packets are forwarded as they come, by the TC program,
//! so nothing in the proxy can hold them back; what can be slowed is the sender. The
//! program clamps the window each receiver advertises (in the other direction's packets,
//! the ACKs) at what user space writes in the entry's slot of its `clamps` map. A sender
//! held by its window sends one window per round trip, so a clamp of `rate × rtt` is a
//! rate; the round trip is only estimated (the legs' smoothed RTTs at the take-over), so
//! [`Steer`] corrects the clamp from the bytes the program counted, every two round trips.
//!
//! The least it can hold a direction to is two segments a round trip: a smaller window
//! stalls a TCP sender (it waits for a window of a whole segment, then probes on a timer).
//! Below that rate the clamp stays at two segments (docs/pacer.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use splicer_bpf::ipsplice::FlowKey;
use splicer_bpf::Ipsplice;
use tokio::time::Instant;

use super::eligible::Legs;
use crate::pacer::Outlet;

/// The two slots of the program's `clamps` map a tunnel's entries name, given back when
/// dropped (after the entries are gone: a slot may be taken for another tunnel at once).
pub(super) struct Slots {
    ip: Arc<Ipsplice>,
    /// The slot of the entry keyed by the client's packets (it clamps the windows the
    /// upstream sees: the downstream direction's pace), and of the upstream's.
    pub ids: [u32; 2],
}

impl Slots {
    /// Two slots, or 0 for any the map has no room for (that direction is then not paced).
    pub(super) fn take(ip: &Arc<Ipsplice>) -> Slots {
        let take = || ip.take_slot().unwrap_or(0);
        Slots {
            ids: [take(), take()],
            ip: Arc::clone(ip),
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for s in self.ids {
            self.ip.give_slot(s);
        }
    }
}

/// The path a tunnel's windows are clamped on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Path {
    /// Round trip between the endpoints: both legs' together.
    rtt: Duration,
    /// The largest segment either leg sends.
    mss: u32,
}

impl Path {
    pub(super) fn of(legs: &Legs) -> Path {
        let us = u64::from(legs.a.rtt_us) + u64::from(legs.b.rtt_us);
        Path {
            // A fresh leg's RTT may read 0: at least 100 µs, a veth hop's order.
            rtt: Duration::from_micros(us.max(100)),
            mss: legs.a.snd_mss.max(legs.b.snd_mss).max(536),
        }
    }

    /// The least clamp, the clamp that `rate` would need on this round trip, and the most.
    fn bounds(&self, rate: u64) -> (u64, u64, u64) {
        let least = 2 * u64::from(self.mss);
        let base = (rate as f64 * self.rtt.as_secs_f64()) as u64;
        // At most 4 × base: a sender that paused (its rate below the cap) lets the clamp
        // grow, and its next burst may overshoot by that for one round trip. Below 2^30,
        // the largest window TCP can advertise.
        let most = base.saturating_mul(4).clamp(2 * least, 1 << 30);
        (least, base.clamp(least, most), most)
    }

    /// How long a measurement of the rate runs before the clamp is corrected: two round
    /// trips (a window-limited sender moves in bursts of a round trip), at least 20 ms.
    fn period(&self) -> Duration {
        (self.rtt * 2).max(Duration::from_millis(20))
    }
}

/// One direction's clamp, steered toward a rate.
#[derive(Debug, Default)]
pub(super) struct Steer {
    /// The clamp written (0: none).
    window: u64,
    /// The rate it is steered to.
    target: Option<u64>,
    /// Bytes counted and when, at the start of the measurement under way.
    mark: Option<(u64, Instant)>,
}

impl Steer {
    /// The clamp to write now, if it changes: `bytes` is what the direction moved so far.
    pub(super) fn next(
        &mut self,
        rate: Option<u64>,
        bytes: u64,
        now: Instant,
        path: Path,
    ) -> Option<u64> {
        let Some(rate) = rate else {
            self.target = None;
            self.mark = None;
            return (std::mem::take(&mut self.window) != 0).then_some(0);
        };
        let (least, base, most) = path.bounds(rate);
        let old = self.window;
        if self.target != Some(rate) || self.window == 0 {
            // A new rate starts from the round trip's estimate.
            self.target = Some(rate);
            self.window = base;
            self.mark = Some((bytes, now));
        } else if let Some((then, at)) = self.mark {
            let dt = now.saturating_duration_since(at);
            if dt >= path.period() {
                let moved = bytes.saturating_sub(then) as f64 / dt.as_secs_f64();
                let want = rate as f64;
                // Within 2% is on target; otherwise the clamp moves by the ratio, at most
                // halved or doubled at once (a measurement is a round trip's few bursts).
                if moved > want * 1.02 || moved < want * 0.98 {
                    let f = (want / moved.max(1.0)).clamp(0.5, 2.0);
                    self.window = ((self.window as f64 * f) as u64).clamp(least, most);
                }
                self.mark = Some((bytes, now));
            }
        }
        (self.window != old).then_some(self.window)
    }
}

/// An `ipsplice` tunnel as the pacer's [`Outlet`]: caps come before the take-over too (the
/// pacer starts with the tunnel) and apply from the moment the entries are active.
#[derive(Default)]
pub(crate) struct Pace {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    rate: Option<u64>,
    on: Option<Active>,
    /// The counts [`Outlet::sent`] read and when, for the [`Outlet::cap`] that follows it
    /// in the same look (each is a map lookup per direction); older ones are read again.
    read: Option<([u64; 2], Instant)>,
}

/// A spliced tunnel's entries, as its pace needs them.
struct Active {
    ip: Arc<Ipsplice>,
    keys: (FlowKey, FlowKey),
    slots: [u32; 2],
    path: Path,
    /// Downstream (the upstream's bytes, clamped in the client's windows), then upstream.
    steer: [Steer; 2],
}

impl Active {
    /// Bytes the program counted from the upstream (downstream) and from the client.
    fn moved(&self) -> [u64; 2] {
        let bytes = |k: &FlowKey| self.ip.get(k).map_or(0, |f| f.bytes);
        [bytes(&self.keys.1), bytes(&self.keys.0)]
    }

    fn apply(&mut self, rate: Option<u64>, moved: Option<[u64; 2]>) {
        let now = Instant::now();
        let moved = moved.unwrap_or_else(|| self.moved());
        for (i, steer) in self.steer.iter_mut().enumerate() {
            if self.slots[i] == 0 {
                continue;
            }
            if let Some(w) = steer.next(rate, moved[i], now, self.path) {
                let w = u32::try_from(w).unwrap_or(u32::MAX);
                if let Err(e) = self.ip.set_clamp(self.slots[i], w) {
                    tracing::warn!(error = %e, "pacer: cannot clamp an ipsplice window");
                }
            }
        }
    }
}

impl Pace {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tunnel's entries are active: its cap applies from now on.
    pub(super) fn attach(
        &self,
        ip: &Arc<Ipsplice>,
        keys: (FlowKey, FlowKey),
        slots: &Slots,
        path: Path,
    ) {
        let mut st = self.state();
        let mut on = Active {
            ip: Arc::clone(ip),
            keys,
            slots: slots.ids,
            path,
            steer: Default::default(),
        };
        on.apply(st.rate, None);
        st.on = Some(on);
    }

    /// The tunnel ended: its slots are about to be given back, and nothing may be written
    /// in them for it any more.
    pub(super) fn detach(&self) {
        let mut st = self.state();
        st.on = None;
        st.read = None;
    }
}

impl Outlet for Pace {
    fn sent(&self) -> u64 {
        let mut st = self.state();
        let moved = st.on.as_ref().map(Active::moved);
        st.read = moved.map(|m| (m, Instant::now()));
        moved.map_or(0, |m| m.iter().sum())
    }

    fn cap(&self, rate: Option<u64>) {
        let mut st = self.state();
        st.rate = rate;
        let read = st
            .read
            .take()
            .filter(|(_, at)| at.elapsed() < Duration::from_millis(1))
            .map(|(m, _)| m);
        if let Some(on) = st.on.as_mut() {
            on.apply(rate, read);
        }
    }

    fn steered(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn path(rtt_ms: u64) -> Path {
        Path {
            rtt: Duration::from_millis(rtt_ms),
            mss: 1448,
        }
    }

    #[test]
    fn a_rate_starts_from_the_round_trip_and_is_steered_by_what_moved() {
        let p = path(80);
        let t0 = Instant::now();
        let mut s = Steer::default();
        // 1 MB/s over 80 ms: 80,000 bytes in flight.
        assert_eq!(s.next(Some(1_000_000), 0, t0, p), Some(80_000));
        // Before two round trips nothing is judged.
        assert_eq!(s.next(Some(1_000_000), 500_000, t0 + MS * 100, p), None);
        // 160 ms moved 320,000 bytes: 2 MB/s, twice the rate: halved.
        assert_eq!(
            s.next(Some(1_000_000), 320_000, t0 + 160 * MS, p),
            Some(40_000)
        );
        // On target (1 MB/s ± 2%): unchanged.
        assert_eq!(s.next(Some(1_000_000), 480_000, t0 + 320 * MS, p), None);
        // Far too slow: at most doubled at once.
        assert_eq!(
            s.next(Some(1_000_000), 490_000, t0 + 480 * MS, p),
            Some(80_000)
        );
        // A sender that stopped sending lets it grow, to 4 × the estimate at most.
        let mut at = 480;
        for _ in 0..10 {
            at += 160;
            s.next(Some(1_000_000), 490_000, t0 + at * MS, p);
        }
        assert_eq!(s.window, 320_000);
        // Lifted: the clamp goes, once.
        assert_eq!(s.next(None, 490_000, t0 + (at + 1) * MS, p), Some(0));
        assert_eq!(s.next(None, 490_000, t0 + (at + 2) * MS, p), None);
    }

    #[test]
    fn a_clamp_is_never_below_two_segments_and_a_new_rate_starts_afresh() {
        let p = path(1);
        let t0 = Instant::now();
        let mut s = Steer::default();
        // 100 kB/s over 1 ms would be 100 bytes: two segments instead.
        assert_eq!(s.next(Some(100_000), 0, t0, p), Some(2896));
        // Still too fast at two segments: it stays there.
        assert_eq!(s.next(Some(100_000), 2_000_000, t0 + 20 * MS, p), None);
        // A new rate: its own estimate, measured from now.
        assert_eq!(
            s.next(Some(50_000_000), 2_000_000, t0 + 21 * MS, p),
            Some(50_000)
        );
        assert_eq!(s.mark, Some((2_000_000, t0 + 21 * MS)));
    }
}
