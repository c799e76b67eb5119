//! Stop strings over streamed text.
//!
//! Text arrives in deltas, and a stop string can straddle several of them, so the matcher holds
//! back any tail that could still become a stop string and releases it once it cannot. On a
//! match, output ends right before the stop string, which is never emitted (OpenAI's behaviour).
//!
//! With several stop strings, generation stops at the first point where any of them is
//! complete, and the text is cut at the start of the earliest-starting one completed there. That
//! is what a token-by-token generator observes, so the result does not depend on how the text
//! happened to be split into deltas.

/// What one delta releases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopOutcome {
    /// Text that is safe to send: it cannot be part of a stop string.
    pub emit: String,
    /// A stop string has matched; later deltas are ignored.
    pub stopped: bool,
}

#[derive(Debug, Clone)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Text received but not yet emitted, because it may be the start of a stop string.
    held: String,
    stopped: bool,
    /// Which stop string ended the text, once one has.
    matched: Option<usize>,
}

impl StopStrings {
    /// Empty stop strings are ignored: they would match before any text.
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        Self {
            stops,
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// The stop string that ended the text, if one did (Anthropic reports it).
    pub fn matched(&self) -> Option<&str> {
        self.matched
            .and_then(|index| self.stops.get(index))
            .map(String::as_str)
    }

    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(delta);
        if let Some((cut, index)) = self.earliest_match() {
            self.stopped = true;
            self.matched = Some(index);
            self.held.truncate(cut);
            return StopOutcome {
                emit: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep_from = self.partial_match_start();
        let rest = self.held.split_off(keep_from);
        StopOutcome {
            emit: std::mem::replace(&mut self.held, rest),
            stopped: false,
        }
    }

    /// Releases what was held back, at the end of generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Where to cut for the match that completes first (earliest end; earliest start among
    /// those), and which stop string it is, if any occurs in the held text.
    fn earliest_match(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(index, stop)| {
                let start = self.held.find(stop.as_str())?;
                Some((start + stop.len(), start, index))
            })
            .min()
            .map(|(_end, start, index)| (start, index))
    }

    /// The start of the longest tail of the held text that is a proper prefix of a stop string,
    /// or the end of the text when there is none. Only char boundaries are tried, so no
    /// character is ever split.
    fn partial_match_start(&self) -> usize {
        let text = self.held.as_str();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest = text.len().saturating_sub(longest.saturating_sub(1));
        text.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| {
                let tail = &text[i..];
                self.stops.iter().any(|stop| stop.starts_with(tail))
            })
            .unwrap_or(text.len())
    }
}

#[cfg(test)]
mod tests;
