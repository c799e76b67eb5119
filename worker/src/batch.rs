//! The batch: every sequence this worker is running, stepped together.
//!
//! Each step admits waiting requests while there are free slots and their prefill fits in
//! memory, prefills one chunk of the oldest sequence still prefilling, and then runs one decode
//! step for every sequence that has logits: each samples its own token, and the tokens of those
//! that go on are forwarded together in one pass. A sequence that ends leaves the batch at once,
//! and its KV cache is freed with it.

use std::collections::VecDeque;

use mlx_rs::error::Exception;

use crate::generation::{
    Event, FinishReason, GenerateError, GenerateRequest, Prepared, RejectReason, prepare,
};
use crate::loaded::LoadedModel;
use crate::model::KvCache;
use crate::prefill_guard::{self, Prefill};
use crate::prefix_cache::PrefixCache;
use crate::sampling::Sampler;
use crate::sequence::{Next, Sequence, done_without_compute, host_rows};

/// Sequences decoded together unless the configuration says otherwise.
pub const DEFAULT_MAX_SEQUENCES: usize = 16;

/// Prompt tokens per prefill pass unless the configuration says otherwise: bounds both the
/// activation memory of a long prompt and how long it holds up the running sequences.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_sequences: usize,
    pub prefill_chunk: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            max_sequences: DEFAULT_MAX_SEQUENCES,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
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
    /// Ends the sequence with `reason`, or with the error that stopped it.
    fn end(mut self, ending: Result<FinishReason, GenerateError>) {
        let sink = &mut self.sink;
        let result = match ending {
            Ok(reason) => self.sequence.finish(reason, &mut |event| sink(Ok(event))),
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
}

impl<'m, 'p, 's> Batch<'m, 'p, 's> {
    pub fn new(
        loaded: &'m LoadedModel,
        limits: BatchLimits,
        memory_limit: Option<u64>,
        prefix: Option<&'p mut PrefixCache>,
    ) -> Self {
        Self {
            loaded,
            limits,
            memory_limit,
            prefix,
            waiting: VecDeque::new(),
            running: Vec::new(),
        }
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
        let checked = prepare(self.loaded, &job.request).and_then(|prepared| {
            let sampler = Sampler::new(job.request.sampling.clone())?;
            Ok((prepared, sampler))
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
            (job.sink)(Ok(Event::Accepted { prompt_tokens }));
            return (job.sink)(Ok(done_without_compute(FinishReason::Stop, prompt_tokens)));
        }
        self.waiting.push_back(Waiting {
            job,
            prepared,
            sampler,
        });
    }

    /// One round: admissions, one prefill chunk, one decode step.
    pub fn step(&mut self) {
        self.admit();
        self.prefill_one_chunk();
        self.decode();
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
                (waiting.job.sink)(Ok(Event::Accepted { prompt_tokens }));
                (waiting.job.sink)(Ok(done_without_compute(
                    FinishReason::Cancelled,
                    prompt_tokens,
                )));
                continue;
            }
            if let Err(too_large) = self.fits(prompt_tokens) {
                if self.running.is_empty() {
                    (waiting.job.sink)(Err(RejectReason::from(too_large).into()));
                    continue;
                }
                self.waiting.push_front(waiting);
                return;
            }
            (waiting.job.sink)(Ok(Event::Accepted { prompt_tokens }));
            let sequence = Sequence::start(
                self.loaded,
                &waiting.job.request,
                waiting.prepared,
                waiting.sampler,
                self.prefix.as_deref_mut(),
            );
            self.running.push(Running {
                sequence,
                cancelled: waiting.job.cancelled,
                sink: waiting.job.sink,
            });
        }
    }

    /// Whether a prefill of `prompt_tokens` fits under the memory limit, counting the KV caches
    /// that admitted sequences have yet to fill.
    fn fits(&self, prompt_tokens: usize) -> Result<(), prefill_guard::PrefillTooLarge> {
        let Some(limit) = self.memory_limit else {
            return Ok(());
        };
        let model = &self.loaded.model;
        let reserved = self
            .running
            .iter()
            .filter(|running| running.sequence.unprefilled() > 0)
            .map(|running| {
                prefill_guard::kv_cache_bytes(
                    &model.config,
                    model.dtype(),
                    running.sequence.prompt_tokens(),
                )
            })
            .sum();
        let prefill = Prefill {
            prompt_tokens,
            chunk: self.limits.prefill_chunk,
            reserved,
        };
        prefill_guard::admit(&model.config, model.dtype(), prefill, limit)
    }

    /// Prefills one chunk of the oldest sequence still prefilling, so a long prompt holds up
    /// the running sequences for one chunk per step at most.
    fn prefill_one_chunk(&mut self) {
        let Some(index) = self
            .running
            .iter()
            .position(|running| running.sequence.unprefilled() > 0)
        else {
            return;
        };
        let running = &mut self.running[index];
        let outcome = if (running.cancelled)() {
            Err(Ok(FinishReason::Cancelled))
        } else {
            running
                .sequence
                .prefill(self.limits.prefill_chunk, self.prefix.as_deref_mut())
                .map_err(|error| Err(error.into()))
        };
        if let Err(ending) = outcome {
            self.running.swap_remove(index).end(ending);
        }
    }

    /// Every sequence with logits samples its token; those that go on are forwarded together.
    fn decode(&mut self) {
        let mut forwarded: Vec<(usize, u32)> = Vec::new();
        let mut index = 0;
        while index < self.running.len() {
            let running = &mut self.running[index];
            let Some(logits) = running.sequence.take_logits() else {
                index += 1;
                continue;
            };
            let next = if (running.cancelled)() {
                Ok(Next::Finished(FinishReason::Cancelled))
            } else {
                let sink = &mut running.sink;
                running
                    .sequence
                    .advance(logits, &mut |event| sink(Ok(event)))
            };
            match next {
                Ok(Next::Forward(token)) => {
                    forwarded.push((index, token));
                    index += 1;
                }
                // The rows forwarded so far are all before `index`, so removal keeps them valid.
                Ok(Next::Finished(reason)) => self.running.remove(index).end(Ok(reason)),
                Err(error) => self.running.remove(index).end(Err(error)),
            }
        }
        if forwarded.is_empty() {
            return;
        }
        if let Err(error) = self.forward(&forwarded) {
            // One pass computed every row, so its failure is every forwarded sequence's.
            let message = error.to_string();
            for &(index, _) in forwarded.iter().rev() {
                let error = mlx_rs::error::Exception::from(message.as_str());
                self.running.remove(index).end(Err(error.into()));
            }
        }
    }

    /// One decode pass over the forwarded rows; each gets its logits.
    fn forward(&mut self, forwarded: &[(usize, u32)]) -> Result<(), Exception> {
        let tokens: Vec<u32> = forwarded.iter().map(|&(_, token)| token).collect();
        let mut rows: Vec<&mut Sequence<'m>> = Vec::with_capacity(forwarded.len());
        let mut wanted = forwarded.iter().map(|&(index, _)| index).peekable();
        for (index, running) in self.running.iter_mut().enumerate() {
            if wanted.next_if_eq(&index).is_some() {
                rows.push(&mut running.sequence);
            }
        }
        let mut caches: Vec<&mut [KvCache]> = rows
            .iter_mut()
            .map(|sequence| sequence.cache.as_mut_slice())
            .collect();
        let model = &self.loaded.model;
        let hidden = model.step_hidden_states(&tokens, &mut caches)?;
        let logits = host_rows(&model.logits(&hidden)?)?;
        for (sequence, row) in rows.into_iter().zip(logits) {
            sequence.set_logits(row);
        }
        Ok(())
    }
}
