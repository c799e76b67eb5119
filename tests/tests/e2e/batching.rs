//! Continuous batching changes no answer: each sequence's logits in a shared pass (decode steps
//! packed with other sequences' prompt chunks) are those of the same sequence run alone, and the engine's greedy text on the real model is the solo
//! text, whatever the batch size, the moment a sequence joins, the cancellations beside it or the
//! prefix-cache hits within it.

use std::sync::atomic::Ordering;

use corral_fixture::Arch;
use corral_tests::{smollm2_gguf, tiny_model};
use corral_worker::batch::BatchLimits;
use corral_worker::engine::{Engine, EngineOptions, Submission};
use corral_worker::generation::{Event, FinishReason, GenerateRequest, Prompt};
use corral_worker::model::{KvCache, Model, Segment};
use corral_worker::prefix_cache::PrefixCacheOptions;

use crate::logit_checks::worst_difference;
use crate::reference_logits::host_rows;

const TOLERANCE: f32 = 1e-3;

fn argmax(row: &[f32]) -> u32 {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap() as u32
}

/// A prompt of `length` tokens, different for each `seed`.
fn prompt(seed: u32, length: usize) -> Vec<u32> {
    (0..length as u32)
        .map(|position| (seed * 131 + position * 17 + 3) % 1000 + 1)
        .collect()
}

/// The logits of each greedy step of `prompt` run alone: the prefill's, then one per decode step.
fn solo_logits(model: &Model, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(prompt, &mut cache).unwrap();
    let last = mlx_rs::ops::indexing::IndexOp::index(&hidden, (.., -1.., ..));
    let mut rows = vec![host_rows(&model.logits(&last).unwrap()).remove(0)];
    for _ in 0..steps {
        let token = argmax(rows.last().unwrap());
        let hidden = model.hidden_states(&[token], &mut cache).unwrap();
        rows.push(host_rows(&model.logits(&hidden).unwrap()).remove(0));
    }
    rows
}

/// One sequence of the batched schedule: its prompt enters the passes at pass `join`, in chunks
/// of at most [`CHUNK`] tokens beside the others' decode steps and chunks, and it leaves after
/// `steps` decode steps.
struct Scheduled {
    prompt: Vec<u32>,
    join: usize,
    steps: usize,
}

/// Prompt tokens per pass and sequence, so long prompts take several passes.
const CHUNK: usize = 40;

struct Live {
    index: usize,
    cache: Vec<KvCache>,
    prefilled: usize,
    logits: Vec<Vec<f32>>,
}

/// Runs the schedule in packed passes as the batch does (single-token inputs first); returns
/// each sequence's logits in order.
fn batched_logits(model: &Model, schedule: &[Scheduled]) -> Vec<Vec<Vec<f32>>> {
    let mut results: Vec<Vec<Vec<f32>>> = vec![Vec::new(); schedule.len()];
    let mut live: Vec<Live> = Vec::new();
    let mut pass = 0;
    while pass <= schedule.iter().map(|s| s.join).max().unwrap() || !live.is_empty() {
        for (index, sequence) in schedule.iter().enumerate() {
            if sequence.join == pass {
                live.push(Live {
                    index,
                    cache: model.new_cache(),
                    prefilled: 0,
                    logits: Vec::new(),
                });
            }
        }
        pass += 1;
        // Sequences that took all their steps leave, their caches with them.
        for sequence in live.iter() {
            if sequence.logits.len() > schedule[sequence.index].steps {
                results[sequence.index] = sequence.logits.clone();
            }
        }
        live.retain(|sequence| sequence.logits.len() <= schedule[sequence.index].steps);
        live.sort_by_key(|sequence| schedule[sequence.index].prompt.len() - sequence.prefilled > 1);
        let inputs: Vec<Vec<u32>> = live
            .iter()
            .map(|sequence| {
                let prompt = &schedule[sequence.index].prompt;
                match sequence.logits.last() {
                    Some(logits) => vec![argmax(logits)],
                    None => {
                        let end = (sequence.prefilled + CHUNK).min(prompt.len());
                        prompt[sequence.prefilled..end].to_vec()
                    }
                }
            })
            .collect();
        if inputs.is_empty() {
            continue;
        }
        let mut segments: Vec<Segment> = live
            .iter_mut()
            .zip(&inputs)
            .map(|(sequence, tokens)| Segment {
                tokens,
                cache: sequence.cache.as_mut_slice(),
                embedded: Vec::new(),
            })
            .collect();
        let hidden = model.packed_hidden_states(&mut segments).unwrap();
        drop(segments);
        let mut end = 0;
        let mut wanting = Vec::new();
        let mut last_positions = Vec::new();
        for (slot, (sequence, tokens)) in live.iter_mut().zip(&inputs).enumerate() {
            end += tokens.len() as i32;
            let prompt = &schedule[sequence.index].prompt;
            if sequence.logits.is_empty() {
                sequence.prefilled += tokens.len();
                if sequence.prefilled < prompt.len() {
                    continue;
                }
            }
            wanting.push(slot);
            last_positions.push(end - 1);
        }
        if wanting.is_empty() {
            hidden.eval().unwrap();
            continue;
        }
        let positions = mlx_rs::Array::from_slice(&last_positions, &[last_positions.len() as i32]);
        let last = hidden.take_axis(positions, 1).unwrap();
        let rows = host_rows(&model.logits(&last).unwrap());
        assert_eq!(rows.len(), wanting.len());
        for (slot, row) in wanting.into_iter().zip(rows) {
            live[slot].logits.push(row);
        }
    }
    results
}

fn check_schedule(model: &Model, schedule: &[Scheduled]) {
    let batched = batched_logits(model, schedule);
    for (index, sequence) in schedule.iter().enumerate() {
        let alone = solo_logits(model, &sequence.prompt, sequence.steps);
        assert_eq!(batched[index].len(), alone.len(), "sequence {index}: steps");
        for (step, (got, want)) in batched[index].iter().zip(&alone).enumerate() {
            let worst = worst_difference(got, want);
            assert!(
                worst <= TOLERANCE,
                "{} sequences, sequence {index} (prompt of {}, joined at {}), step {step}: \
                 logits differ by {worst} from the solo run",
                schedule.len(),
                sequence.prompt.len(),
                sequence.join
            );
        }
    }
}

#[test]
fn each_rows_logits_in_a_shared_step_are_its_solo_logits() {
    for arch in [Arch::Llama, Arch::Qwen3] {
        let fixture = tiny_model(arch);
        let model = Model::load(fixture.path()).unwrap();
        let lengths = [7, 33, 3, 120, 16, 61, 1, 250];
        for count in [1, 2, 5, 8] {
            // Different prompt lengths, joining at different steps, leaving at different steps
            // (a short one leaves early, as a cancelled sequence does).
            let schedule: Vec<Scheduled> = (0..count)
                .map(|index| Scheduled {
                    prompt: prompt(index as u32 + 1, lengths[index]),
                    join: index * 2,
                    steps: if index == 1 { 3 } else { 12 + index },
                })
                .collect();
            check_schedule(&model, &schedule);
        }
    }
}

fn greedy(prompt: &str, max_tokens: usize) -> GenerateRequest {
    let prompt = Prompt::Chat {
        messages: vec![serde_json::json!({"role": "user", "content": prompt})],
        tools: None,
        template_kwargs: None,
        images: Vec::new(),
    };
    GenerateRequest::greedy(prompt, max_tokens)
}

/// A request's events so far, read as they come.
struct Watched {
    submission: Submission,
    events: Vec<Event>,
}

impl Watched {
    fn deltas(&self) -> usize {
        self.events
            .iter()
            .filter(|event| matches!(event, Event::Delta { .. }))
            .count()
    }

    fn done(&self) -> bool {
        matches!(self.events.last(), Some(Event::Done { .. }))
    }

    /// Waits for the next event.
    fn pull(&mut self) {
        let event = self.submission.events.recv().unwrap().unwrap();
        self.events.push(event);
    }

    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|event| match event {
                Event::Delta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn finish(&self) -> (FinishReason, usize) {
        match self.events.last() {
            Some(Event::Done {
                finish_reason,
                timings,
                ..
            }) => (*finish_reason, timings.cached_tokens),
            other => panic!("no Done event: {other:?}"),
        }
    }
}

const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "List three colours.",
    "Why is the sky blue? Answer in a short paragraph that a child would understand.",
    "What is the capital of France? Also name its river.",
    "Say hello.",
    "Give me a short poem about a cat who sleeps all day in the sun by the window.",
    "How many legs does a spider have?",
];

const ANSWER_TOKENS: usize = 24;

fn engine(max_sequences: usize, prefix: bool) -> Engine {
    let options = EngineOptions {
        memory_limit: None,
        batch: BatchLimits {
            max_sequences,
            ..BatchLimits::default()
        },
        prefix_cache: prefix.then_some(PrefixCacheOptions {
            block_tokens: 16,
            ram_bytes: 256 << 20,
            disk_root: None,
            disk_bytes: 0,
            snapshot_every: corral_worker::prefix_cache::DEFAULT_SNAPSHOT_EVERY,
        }),
        ..EngineOptions::default()
    };
    Engine::start_with(smollm2_gguf(), options).unwrap()
}

#[test]
fn smollm2_greedy_text_is_the_solo_text_in_batches_of_1_2_5_and_8() {
    let solo_engine = engine(1, false);
    let solo: Vec<String> = QUESTIONS
        .iter()
        .map(|question| {
            let mut watched = Watched {
                submission: solo_engine.submit(greedy(question, ANSWER_TOKENS)).unwrap(),
                events: Vec::new(),
            };
            while !watched.done() {
                watched.pull();
            }
            watched.text()
        })
        .collect();
    drop(solo_engine);

    let batched = engine(8, true);
    for count in [1, 2, 5, 8] {
        let mut running: Vec<Watched> = Vec::new();
        for question in &QUESTIONS[..count] {
            // Each joins once the one before has produced text: they join at different steps.
            if let Some(previous) = running.last_mut() {
                while previous.deltas() == 0 && !previous.done() {
                    previous.pull();
                }
            }
            running.push(Watched {
                submission: batched.submit(greedy(question, ANSWER_TOKENS)).unwrap(),
                events: Vec::new(),
            });
        }
        // A sequence cancelled in the middle of the batch leaves the others' answers alone.
        let mut cancelled = Watched {
            submission: batched
                .submit(greedy("Tell me a long story about dragons.", 200))
                .unwrap(),
            events: Vec::new(),
        };
        while cancelled.deltas() == 0 {
            cancelled.pull();
        }
        cancelled.submission.cancel.store(true, Ordering::Relaxed);
        while !cancelled.done() {
            cancelled.pull();
        }
        assert_eq!(cancelled.finish().0, FinishReason::Cancelled);
        for watched in running.iter_mut() {
            while !watched.done() {
                watched.pull();
            }
        }
        for (index, watched) in running.iter().enumerate() {
            assert_eq!(
                watched.text(),
                solo[index],
                "batch of {count}: question {index} answered differently than alone"
            );
        }
        if count == 8 {
            // Question 4 extends question 0, asked in every earlier batch: its prefix came
            // from the cache while the others were running.
            let (_, cached) = running[4].finish();
            assert!(
                cached > 0,
                "question 4 restored nothing from the prefix cache"
            );
        }
    }
}
