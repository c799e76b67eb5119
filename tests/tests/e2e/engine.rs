//! The engine thread: it loads the model, runs queued requests one after another, reports
//! each request's events in order, and stops a cancelled request at the next token.

use std::sync::atomic::Ordering;

use corral_fixture::Arch;
use corral_tests::tiny_model;
use corral_worker::engine::{Engine, EngineError};
use corral_worker::generation::{Event, FinishReason, GenerateRequest, Prompt};

fn request(prompt: &str, max_tokens: usize) -> GenerateRequest {
    GenerateRequest::greedy(Prompt::Text(prompt.into()), max_tokens)
}

fn collect(submission: &corral_worker::engine::Submission) -> Vec<Event> {
    submission
        .events
        .iter()
        .map(|event| event.expect("generation succeeds"))
        .collect()
}

#[test]
fn queued_requests_each_run_to_their_end_in_order() {
    let model = tiny_model(Arch::Qwen2);
    let engine = Engine::start(model.path().to_path_buf()).unwrap();
    assert!(engine.info.weight_bytes > 0);
    let first = engine.submit(request("The first request", 20)).unwrap();
    let second = engine.submit(request("The second one", 7)).unwrap();
    for (submission, max_tokens) in [(&first, 20), (&second, 7)] {
        let events = collect(submission);
        assert!(matches!(events[0], Event::Accepted { prompt_tokens, .. } if prompt_tokens > 0));
        let Some(Event::Done {
            finish_reason,
            timings,
            ..
        }) = events.last()
        else {
            panic!("no Done event: {events:?}");
        };
        assert!(timings.completion_tokens <= max_tokens);
        if *finish_reason == FinishReason::Length {
            assert_eq!(timings.completion_tokens, max_tokens);
        }
    }
}

#[test]
fn cancelling_stops_the_sequence_at_the_next_token() {
    let model = tiny_model(Arch::Llama);
    let engine = Engine::start(model.path().to_path_buf()).unwrap();
    let submission = engine.submit(request("Go on and on", 3000)).unwrap();
    let mut events = Vec::new();
    for event in submission.events.iter() {
        let event = event.unwrap();
        if matches!(event, Event::Delta { .. }) {
            submission.cancel.store(true, Ordering::Relaxed);
        }
        events.push(event);
    }
    let Some(Event::Done {
        finish_reason,
        timings,
        ..
    }) = events.last()
    else {
        panic!("no Done event: {events:?}");
    };
    assert_eq!(*finish_reason, FinishReason::Cancelled);
    assert!(timings.completion_tokens < 100, "{timings:?}");
    // The engine is free again: a new request runs to completion.
    let next = engine.submit(request("Next", 3)).unwrap();
    assert!(matches!(collect(&next).last(), Some(Event::Done { .. })));
}

#[test]
fn a_refused_request_does_not_stop_the_engine() {
    let model = tiny_model(Arch::Llama);
    let engine = Engine::start(model.path().to_path_buf()).unwrap();
    let empty = engine.submit(request("", 5)).unwrap();
    let error = empty.events.recv().unwrap().unwrap_err();
    assert!(error.to_string().contains("refused"), "{error}");
    let next = engine.submit(request("Still here", 3)).unwrap();
    assert!(matches!(collect(&next).last(), Some(Event::Done { .. })));
}

#[test]
fn a_model_that_fails_to_load_is_an_error_not_a_hang() {
    let missing = std::env::temp_dir().join("corral-no-such-model");
    let Err(error) = Engine::start(missing) else {
        panic!("a missing model loaded");
    };
    assert!(matches!(error, EngineError::Load(_)), "{error}");
}

fn text_of(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_stop_string_ends_the_text_right_before_it() {
    let model = tiny_model(Arch::Llama);
    let engine = Engine::start(model.path().to_path_buf()).unwrap();
    let full = text_of(&collect(&engine.submit(request("Once upon", 40)).unwrap()));
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 12, "greedy text too short: {full:?}");
    let stop: String = chars[8..11].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    let mut stopped_request = request("Once upon", 40);
    stopped_request.stop = vec![stop.clone()];
    let events = collect(&engine.submit(stopped_request).unwrap());
    assert_eq!(text_of(&events), expected, "stop {stop:?}");
    assert!(matches!(
        events.last(),
        Some(Event::Done {
            finish_reason: FinishReason::Stop,
            ..
        })
    ));
}
