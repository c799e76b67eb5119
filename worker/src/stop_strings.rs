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
}

impl StopStrings {
    /// Empty stop strings are ignored: they would match before any text.
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        Self {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(delta);
        if let Some(cut) = self.earliest_match() {
            self.stopped = true;
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
    /// those), if any stop string occurs in the held text.
    fn earliest_match(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|stop| {
                let start = self.held.find(stop.as_str())?;
                Some((start + stop.len(), start))
            })
            .min()
            .map(|(_end, start)| start)
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
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopStrings {
        StopStrings::new(stops.iter().map(|s| s.to_string()))
    }

    /// Feeds the deltas and returns everything emitted plus whether it stopped.
    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut m = matcher(stops);
        let mut out = String::new();
        for delta in deltas {
            let outcome = m.push(delta);
            out.push_str(&outcome.emit);
            if outcome.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn no_stop_strings_pass_text_straight_through() {
        let mut m = matcher(&[]);
        assert_eq!(m.push("hel").emit, "hel");
        assert_eq!(m.push("lo").emit, "lo");
        assert_eq!(m.finish(), "");
        assert_eq!(
            run(&[""], &["a", "b"]),
            ("ab".into(), false),
            "empty stops ignored"
        );
    }

    #[test]
    fn a_stop_string_inside_one_delta_cuts_before_it() {
        assert_eq!(
            run(&["STOP"], &["hello STOP world"]),
            ("hello ".into(), true)
        );
    }

    #[test]
    fn a_stop_string_spanning_several_deltas_is_caught() {
        assert_eq!(
            run(&["</end>"], &["abc</", "en", "d>tail"]),
            ("abc".into(), true)
        );
    }

    #[test]
    fn a_possible_prefix_is_held_back_then_released() {
        let mut m = matcher(&["</end>"]);
        assert_eq!(m.push("abc</e").emit, "abc");
        let outcome = m.push("xt");
        assert_eq!((outcome.emit.as_str(), outcome.stopped), ("</ext", false));
    }

    #[test]
    fn a_stop_string_at_the_very_start_emits_nothing() {
        assert_eq!(run(&["###"], &["###", "more"]), ("".into(), true));
        assert_eq!(run(&["###"], &["#", "#", "#"]), ("".into(), true));
    }

    #[test]
    fn held_text_is_flushed_by_finish() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("the ST").emit, "the ");
        assert_eq!(m.finish(), "ST");
    }

    #[test]
    fn deltas_after_a_stop_are_ignored() {
        let mut m = matcher(&["x"]);
        assert!(m.push("ax").stopped);
        assert_eq!(
            m.push("more"),
            StopOutcome {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn the_first_completed_stop_string_wins() {
        assert_eq!(
            run(&["world", "lo"], &["hello world"]),
            ("hel".into(), true)
        );
        // "bc" completes before "abcd" could: same answer however the text is split.
        assert_eq!(run(&["abcd", "bc"], &["abcd"]), ("a".into(), true));
        assert_eq!(
            run(&["abcd", "bc"], &["a", "b", "c", "d"]),
            ("a".into(), true)
        );
    }

    #[test]
    fn overlapping_stop_strings_completing_together_cut_at_the_earliest_start() {
        assert_eq!(run(&["c", "abc"], &["xabc"]), ("x".into(), true));
        assert_eq!(
            run(&["c", "abc"], &["x", "a", "b", "c"]),
            ("x".into(), true)
        );
    }

    #[test]
    fn a_stop_string_overlapping_itself_is_found() {
        assert_eq!(run(&["aab"], &["a", "a", "a", "b"]), ("a".into(), true));
    }

    #[test]
    fn multi_byte_characters_are_held_whole() {
        // "日" may start "日本" and is held; "旅" may not and goes out at once.
        let mut m = matcher(&["日本"]);
        assert_eq!(m.push("旅日").emit, "旅");
        assert_eq!(m.push("曜").emit, "日曜");
        assert_eq!(run(&["🦀!"], &["é🦀", "🦀", "!x"]), ("é🦀".into(), true));
    }

    #[test]
    fn emitted_text_is_the_same_however_the_input_is_split() {
        let text = "one <|eot|> two";
        let whole = run(&["<|eot|>"], &[text]);
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&["<|eot|>"], &pieces), whole);
        assert_eq!(whole, ("one ".into(), true));
    }
}
