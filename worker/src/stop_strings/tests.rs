//! The matcher against text split every way a stream can split it: stop strings across deltas,
//! overlapping ones, multi-byte characters, and text held back until the stream ends.

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

#[test]
fn the_matcher_says_which_stop_string_ended_the_text() {
    let mut m = matcher(&["END", "ND!", "stop"]);
    assert_eq!(m.matched(), None);
    assert_eq!(m.push("and then E").emit, "and then ");
    assert_eq!(m.matched(), None);
    let outcome = m.push("ND! more");
    assert!(outcome.stopped);
    // "END" and "ND!" both complete in this delta; "END" ends first.
    assert_eq!(m.matched(), Some("END"));
    let mut unmatched = matcher(&["END"]);
    unmatched.push("the end");
    unmatched.finish();
    assert_eq!(unmatched.matched(), None);
}
