//! The batch: every sequence this worker is running, stepped together.
//!
//! Each step admits waiting requests while there are free slots and their prefill fits in
//! memory, then runs one forward pass over the input of every sequence: the last token of those
//! decoding and prompt chunks of those prefilling, packed together. Each sequence whose input
//! ended in a next-token distribution samples from it at once. A sequence that ends leaves the
//! batch at once, and its KV cache is freed with it.

use std::collections::VecDeque;
use std::time::Instant;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::generation::{
    Event, FinishReason, GenerateError, GenerateRequest, Prepared, RejectReason, prepare,
};
use crate::loaded::LoadedModel;
use crate::model::{Model, Segment};
use crate::prefill_guard::{self, Prefill};
use crate::prefix_cache::PrefixCache;
use crate::prompt_images::{ImageLimits, ImagePrompt};
use crate::sampling::Sampler;
use crate::sequence::{Sequence, done_without_compute, host_rows};
use crate::speculation::draft::{self, Wanted};
use crate::speculation::{Method, Payoff, Speculation};

/// Sequences decoded together unless the configuration says otherwise.
pub const DEFAULT_MAX_SEQUENCES: usize = 16;

/// Prompt tokens per prefill pass unless the configuration says otherwise: bounds both the
/// activation memory of a long prompt and how long it holds up the running sequences.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_sequences: usize,
    pub prefill_chunk: usize,
    /// What a request's images may be, checked as the request is prepared.
    pub images: ImageLimits,
    /// How decoding sequences guess tokens ahead.
    pub speculation: Speculation,
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            max_sequences: DEFAULT_MAX_SEQUENCES,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            images: ImageLimits::default(),
            speculation: Speculation::default(),
        }
    }
}

/// Where a request's events go. Called on the engine thread, so it must not block.
pub type Sink<'s> = Box<dyn FnMut(Result<Event, GenerateError>) + 's>;

/// Whether the request's client has gone; checked before each of its chunks and tokens.
pub type Cancelled<'s> = Box<dyn Fn() -> bool + 's>;

/// A request with its client's ends.
pub struct Job<'s> {
    pub request: GenerateRequest,
    pub cancelled: Cancelled<'s>,
    pub sink: Sink<'s>,
}

/// A request that passed every check that does not depend on the others, waiting for a slot.
struct Waiting<'s> {
    job: Job<'s>,
    prepared: Prepared,
    sampler: Sampler,
}

struct Running<'m, 's> {
    sequence: Sequence<'m>,
    cancelled: Cancelled<'s>,
    sink: Sink<'s>,
}

impl Running<'_, '_> {
    /// Ends the sequence with `reason`, or with the error that stopped it. One that ran to an
    /// end first gives what it computed to the prefix cache, for the conversation's next turn;
    /// one whose pass failed may hold half-written caches, so it gives nothing.
    fn end(
        mut self,
        ending: Result<FinishReason, GenerateError>,
        prefix: Option<&mut PrefixCache>,
    ) {
        let sink = &mut self.sink;
        let result = match ending {
            Ok(reason) => {
                if let Some(prefix) = prefix {
                    self.sequence.keep(prefix);
                }
                self.sequence.finish(reason, &mut |event| sink(Ok(event)))
            }
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            (self.sink)(Err(error));
        }
    }
}

pub struct Batch<'m, 'p, 's> {
    loaded: &'m LoadedModel,
    limits: BatchLimits,
    memory_limit: Option<u64>,
    prefix: Option<&'p mut PrefixCache>,
    waiting: VecDeque<Waiting<'s>>,
    running: Vec<Running<'m, 's>>,
    /// Whether guessing ahead pays, where the model's sequences may guess.
    payoff: Payoff,
    /// The draft model that guesses, where the method is `draft`.
    draft: Option<&'m LoadedModel>,
}

impl<'m, 'p, 's> Batch<'m, 'p, 's> {
    pub fn new(
        loaded: &'m LoadedModel,
        mut limits: BatchLimits,
        memory_limit: Option<u64>,
        prefix: Option<&'p mut PrefixCache>,
    ) -> Self {
        let speculation = &mut limits.speculation;
        let model = loaded.dir.display();
        if speculation.method == Method::Mtp && loaded.model.new_mtp_cache().is_none() {
            tracing::warn!(%model, "speculative decoding off: the checkpoint has no multi-token-prediction layer that runs (a conversion may have dropped it)");
            speculation.method = Method::Off;
        } else if speculation.method != Method::Off {
            tracing::info!(%model, method = ?speculation.method, draft_tokens = speculation.draft_tokens, "speculative decoding: decoding sequences guess tokens ahead");
        }
        Self {
            loaded,
            limits,
            memory_limit,
            prefix,
            waiting: VecDeque::new(),
            running: Vec::new(),
            payoff: Payoff::default(),
            draft: None,
        }
    }

    /// The batch with its sequences guessing in every pass, whatever it costs.
    #[cfg(test)]
    pub(crate) fn guessing_every_pass(mut self) -> Self {
        self.payoff = Payoff::unguarded();
        self
    }

    /// The batch with `draft` guessing for its sequences (`speculative = "draft"`).
    pub fn with_draft(mut self, draft: &'m LoadedModel) -> Self {
        tracing::info!(model = %self.loaded.dir.display(), draft = %draft.dir.display(), "speculative decoding: a draft model guesses");
        self.draft = Some(draft);
        self
    }

    /// Sequences in the batch.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Prepares a request (template, tokens, grammar) and queues it; a request refused by
    /// those checks, or one that only counts its tokens, ends here without waiting.
    pub fn submit(&mut self, mut job: Job<'s>) {
        let checked =
            prepare(self.loaded, &job.request, &self.limits.images).and_then(|prepared| {
                let sampler = Sampler::new(job.request.sampling.clone())?;
                Ok((prepared, sampler))
            });
        let checked = checked.and_then(|checked| match job.request.speculative {
            Some(method) => self.offers(method).map(|()| checked),
            None => Ok(checked),
        });
        let (prepared, sampler) = match checked {
            Ok(checked) => checked,
            Err(reason) => return (job.sink)(Err(reason.into())),
        };
        let prompt_tokens = prepared.tokens.len();
        let context = self.loaded.model.config.max_position_embeddings;
        if prompt_tokens >= context {
            let reason = RejectReason::PromptTooLong {
                prompt: prompt_tokens,
                context,
            };
            return (job.sink)(Err(reason.into()));
        }
        if job.request.count_only {
            (job.sink)(Ok(Event::Accepted {
                prompt_tokens,
                cached_tokens: 0,
            }));
            return (job.sink)(Ok(done_without_compute(FinishReason::Stop, prompt_tokens)));
        }
        self.waiting.push_back(Waiting {
            job,
            prepared,
            sampler,
        });
    }

    /// Whether this worker can guess ahead the way a request asks.
    fn offers(&self, method: Method) -> Result<(), RejectReason> {
        let missing = match method {
            Method::Draft if self.draft.is_none() => {
                "the model has no draft model (its configuration names none: [models.ID] draft)"
            }
            Method::Mtp if self.loaded.model.new_mtp_cache().is_none() => {
                "the model's checkpoint has no multi-token-prediction layer that runs"
            }
            _ => return Ok(()),
        };
        Err(RejectReason::Speculation { method, missing })
    }

    /// One round: admissions, then one pass over the input of every sequence that has some.
    pub fn step(&mut self) {
        self.admit();
        self.end_cancelled();
        self.pass();
    }

    /// Moves waiting requests into the batch in arrival order while a slot is free and the
    /// prefill fits beside the running sequences. A prompt too big even for an empty batch is
    /// refused; one that only lacks room beside the others waits for them to finish.
    fn admit(&mut self) {
        while self.running.len() < self.limits.max_sequences {
            let Some(mut waiting) = self.waiting.pop_front() else {
                return;
            };
            let prompt_tokens = waiting.prepared.tokens.len();
            if (waiting.job.cancelled)() {
                // Nobody waits for it, so it skips the prefill too.
                (waiting.job.sink)(Ok(Event::Accepted {
                    prompt_tokens,
                    cached_tokens: 0,
                }));
                (waiting.job.sink)(Ok(done_without_compute(
                    FinishReason::Cancelled,
                    prompt_tokens,
                )));
                continue;
            }
            let request = &waiting.job.request;
            let method = request
                .speculative
                .unwrap_or(self.limits.speculation.method);
            let images = waiting.prepared.images.as_ref();
            if let Err(too_large) = self.fits(prompt_tokens, images, method) {
                if self.running.is_empty() {
                    (waiting.job.sink)(Err(RejectReason::from(too_large).into()));
                    continue;
                }
                self.waiting.push_front(waiting);
                return;
            }
            // Restored before `Accepted`, which then says how much of the prompt was cached.
            let sequence = Sequence::start(
                self.loaded,
                &waiting.job.request,
                waiting.prepared,
                waiting.sampler,
                self.prefix.as_deref_mut(),
                Speculation {
                    method,
                    ..self.limits.speculation
                },
                self.draft,
            );
            (waiting.job.sink)(Ok(Event::Accepted {
                prompt_tokens,
                cached_tokens: sequence.cached_tokens(),
            }));
            self.running.push(Running {
                sequence,
                cancelled: waiting.job.cancelled,
                sink: waiting.job.sink,
            });
        }
    }

    /// Whether a prefill of `prompt_tokens` fits under the memory limit, counting the KV caches
    /// that admitted sequences have yet to fill, the vision tower on its largest image, and the
    /// draft model's cache where the sequence guesses `method`'s way.
    fn fits(
        &self,
        prompt_tokens: usize,
        images: Option<&ImagePrompt>,
        method: Method,
    ) -> Result<(), prefill_guard::PrefillTooLarge> {
        let Some(limit) = self.memory_limit else {
            return Ok(());
        };
        let model = &self.loaded.model;
        let layers = model.layer_shapes();
        let shape = prefill_guard::Shape::new(&model.config, &layers, model.dtype());
        let chunk = self.limits.prefill_chunk;
        let reserved = self
            .running
            .iter()
            .filter(|running| running.sequence.unprefilled() > 0)
            .map(|running| {
                prefill_guard::kv_cache_bytes(shape, running.sequence.prompt_tokens(), chunk)
            })
            .sum();
        let tower = match (&model.vision, images) {
            (Some(tower), Some(images)) => images
                .grids()
                .map(|grid| tower.activation_bytes(grid, shape.element_bytes()))
                .max()
                .unwrap_or(0),
            _ => 0,
        };
        let draft = match (self.draft, method) {
            (Some(draft), Method::Draft) => {
                let model = &draft.model;
                let layers = model.layer_shapes();
                let shape = prefill_guard::Shape::new(&model.config, &layers, model.dtype());
                prefill_guard::kv_cache_bytes(shape, prompt_tokens, chunk)
            }
            _ => 0,
        };
        let prefill = Prefill {
            prompt_tokens,
            chunk,
            reserved,
            tower,
            draft,
        };
        let verdict = prefill_guard::admit(shape, prefill, limit);
        // A group's ranks take rank 0's verdict, so that every batch admits the same requests.
        let Some(group) = model.group() else {
            return verdict;
        };
        match (group.rank_zeros(verdict.is_ok()), verdict) {
            (true, _) => Ok(()),
            (false, Err(too_large)) => Err(too_large),
            (false, Ok(())) => Err(prefill_guard::PrefillTooLarge {
                prompt_tokens,
                needed: 0,
                tower: 0,
                in_use: 0,
                limit,
            }),
        }
    }

    /// Sequences whose clients have gone leave before the pass, so nothing runs for them.
    fn end_cancelled(&mut self) {
        let mut index = 0;
        while index < self.running.len() {
            if (self.running[index].cancelled)() {
                let prefix = self.prefix.as_deref_mut();
                self.running
                    .remove(index)
                    .end(Ok(FinishReason::Cancelled), prefix);
            } else {
                index += 1;
            }
        }
    }

    /// One forward pass over every sequence's input, packed along the position axis: the last
    /// token of each decoding sequence, and prompt chunks of the oldest prefilling ones up to
    /// `prefill_chunk` tokens in all. The weights are read once for all of them, so a decode
    /// step rides along with a prefill instead of waiting for it. Every sequence whose input
    /// ended in a next-token distribution then samples from it at once.
    fn pass(&mut self) {
        let started = Instant::now();
        let mut budget = self.limits.prefill_chunk;
        let speculating = self
            .running
            .iter()
            .any(|running| running.sequence.speculates());
        let guessing = speculating && self.payoff.guess_now();
        // Rank 0's timings decide for a group, whose ranks must all run the same passes.
        let guessing = match self.loaded.model.group() {
            Some(group) if speculating => group.rank_zeros(guessing),
            _ => guessing,
        };
        if guessing && let Some(draft) = self.draft {
            self.draft_guesses(draft);
        }
        // Single-token inputs go first: the model rotates those in one op.
        let (mut singles, mut longer) = (Vec::new(), Vec::new());
        // Sequences whose input could not be made (an image the tower failed on).
        let mut unmade = Vec::new();
        for (index, running) in self.running.iter_mut().enumerate() {
            let unprefilled = running.sequence.unprefilled();
            let segment = match running.sequence.next_input(&mut budget, guessing) {
                Ok(Some(segment)) => segment,
                Ok(None) => continue,
                Err(error) => {
                    unmade.push((index, Err(error.into())));
                    continue;
                }
            };
            let length = segment.tokens.len();
            let planned = Planned {
                index,
                length,
                unprefilled,
                wants_logits: unprefilled == 0 || length == unprefilled,
                guesses: if unprefilled == 0 { length - 1 } else { 0 },
            };
            let group = if length == 1 {
                &mut singles
            } else {
                &mut longer
            };
            group.push((planned, segment));
        }
        if singles.is_empty() && longer.is_empty() {
            self.end_all(unmade);
            return;
        }
        let (planned, mut segments): (Vec<Planned>, Vec<Segment<'_>>) =
            singles.into_iter().chain(longer).unzip();
        let logits = run_pass(&self.loaded.model, &mut segments, &planned);
        drop(segments);
        let (mut logits, hidden) = match logits {
            Ok((rows, hidden)) => (rows.into_iter(), hidden),
            Err(error) => {
                // One pass computed every input, so its failure is every sequence's in it.
                let message = error.to_string();
                let failed = planned.iter().map(|planned| {
                    let error = Exception::from(message.as_str());
                    (planned.index, Err(error.into()))
                });
                unmade.extend(failed);
                self.end_all(unmade);
                return;
            }
        };
        let generated = |running: &[Running<'_, '_>]| -> usize {
            let sequences = planned
                .iter()
                .map(|planned| &running[planned.index].sequence);
            sequences.map(Sequence::generated).sum()
        };
        let generated_before = generated(&self.running);
        let mut endings = unmade;
        let mut first_row = 0;
        for planned in &planned {
            let running = &mut self.running[planned.index];
            let prefix = self.prefix.as_deref_mut();
            let sink = &mut running.sink;
            let outcome = if planned.guesses > 0 {
                let rows = logits.by_ref().take(planned.guesses + 1).collect();
                running
                    .sequence
                    .check_guesses(rows, prefix, &mut |event| sink(Ok(event)))
            } else {
                let sampled = running.sequence.ran(planned.length, prefix);
                match sampled.then(|| logits.next()).flatten() {
                    Some(row) => running.sequence.advance(row, &mut |event| sink(Ok(event))),
                    None => Ok(None),
                }
            };
            // A multi-token-prediction layer reads what the pass confirmed.
            let outcome = outcome.and_then(|outcome| match outcome {
                None => running
                    .sequence
                    .read_pass(&hidden, first_row)
                    .map(|()| None)
                    .map_err(GenerateError::from),
                ended => Ok(ended),
            });
            first_row += planned.length as i32;
            match outcome {
                Ok(None) => {}
                Ok(Some(reason)) => endings.push((planned.index, Ok(reason))),
                Err(error) => endings.push((planned.index, Err(error))),
            }
        }
        // Only decode passes tell what guessing costs: a prompt chunk's work would blur it.
        if speculating && planned.iter().all(|planned| planned.unprefilled == 0) {
            let tokens = generated(&self.running) - generated_before;
            let guessed = planned.iter().any(|planned| planned.guesses > 0);
            let seconds = started.elapsed().as_secs_f64();
            self.payoff.record(guessed, seconds, tokens);
        }
        self.end_all(endings);
    }

    /// The draft model's guesses for every decoding sequence, before the pass that checks them;
    /// reading a sequence's new tokens into its draft cache takes from the prompt-chunk budget
    /// ahead of the pass's prompt chunks. A failed draft only costs the guesses.
    fn draft_guesses(&mut self, draft: &LoadedModel) {
        let mut wanted: Vec<Wanted<'_>> = self
            .running
            .iter_mut()
            .filter_map(|running| running.sequence.wants_draft())
            .collect();
        let guesses = match draft::guess_all(draft, &mut wanted, self.limits.prefill_chunk) {
            Ok(guesses) => guesses,
            Err(error) => {
                tracing::warn!(draft = %draft.dir.display(), %error, "the draft model failed; this pass guesses nothing");
                return;
            }
        };
        drop(wanted);
        let decoding = self
            .running
            .iter_mut()
            .filter(|running| running.sequence.guesses_by_draft());
        for (running, guesses) in decoding.zip(guesses) {
            running.sequence.receive_draft(guesses);
        }
    }

    /// Ends the running sequences at these indices, each as its result says.
    fn end_all(&mut self, mut endings: Vec<(usize, Result<FinishReason, GenerateError>)>) {
        // Removing from the back keeps the other indices valid.
        endings.sort_unstable_by_key(|(index, _)| std::cmp::Reverse(*index));
        for (index, ending) in endings {
            let prefix = self.prefix.as_deref_mut();
            self.running.remove(index).end(ending, prefix);
        }
    }
}

/// A sequence's place in a pass.
#[derive(Clone, Copy)]
struct Planned {
    /// Its index in the batch.
    index: usize,
    /// Its tokens in the pass.
    length: usize,
    /// Its prompt tokens not yet in its cache before the pass (0 for a decoding sequence).
    unprefilled: usize,
    /// Whether its last position's logits are its next token's distribution.
    wants_logits: bool,
    /// Tokens guessed after its last sampled one, each position's logits checking one.
    guesses: usize,
}

/// Runs the pass; returns the logits of the last position of each segment that wants them (of
/// every position of one that checks guesses), in order, and the pass's hidden states.
fn run_pass(
    model: &Model,
    segments: &mut [Segment<'_>],
    planned: &[Planned],
) -> Result<(Vec<Vec<f32>>, Array), Exception> {
    let hidden = model.packed_hidden_states(segments)?;
    let mut end = 0;
    let mut last_positions = Vec::new();
    for planned in planned {
        end += planned.length as i32;
        if planned.wants_logits {
            last_positions.extend(end - 1 - planned.guesses as i32..end);
        }
    }
    if last_positions.is_empty() {
        // Evaluating the pass writes its keys and values into the caches.
        hidden.eval()?;
        return Ok((Vec::new(), hidden));
    }
    let count = last_positions.len() as i32;
    let last = hidden.take_axis(Array::from_slice(&last_positions, &[count]), 1)?;
    Ok((host_rows(&model.logits(&last)?)?, hidden))
}
