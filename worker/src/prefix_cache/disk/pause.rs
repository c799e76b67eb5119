//! The pause after a full disk: for a while saves are dropped at once instead of each failing
//! on the full disk (and logging); the first save after the pause tries the disk again.

use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(super) struct Pause {
    until: Option<Instant>,
    reported: bool,
}

impl Pause {
    pub(super) fn admits(&self, now: Instant) -> bool {
        self.until.is_none_or(|until| now >= until)
    }

    /// Pauses saves for `length`; returns whether this is the first full disk, the one
    /// reported at error level.
    pub(super) fn start(&mut self, now: Instant, length: Duration) -> bool {
        self.until = Some(now + length);
        !std::mem::replace(&mut self.reported, true)
    }

    /// A write went through; returns whether that ended a pause.
    pub(super) fn end(&mut self) -> bool {
        self.until.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_admits_again_after_its_length_and_reports_once() {
        let mut pause = Pause::default();
        let now = Instant::now();
        assert!(pause.admits(now));
        assert!(pause.start(now, Duration::from_secs(30)));
        assert!(!pause.admits(now + Duration::from_secs(29)));
        assert!(pause.admits(now + Duration::from_secs(30)));
        assert!(!pause.start(now, Duration::from_secs(30)));
        assert!(pause.end());
        assert!(!pause.end());
    }
}
