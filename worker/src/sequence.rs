//! One sequence in the batch, from its admission to its `Done`: its KV cache, its prompt in
//! chunks, and per token the mask, the sample, the stop checks and the output it reports.
//!
//! The forward pass is not here: the batch runs one for all its sequences at once, each giving
//! its input and getting back its row of logits.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use crate::constraint::Constraint;
use crate::generation::{
    Event, FinishReason, GenerateError, GenerateRequest, Prepared, Timings, TokenLogprob,
};
use crate::loaded::LoadedModel;
use crate::model::{KvCache, Segment};
use crate::output::{Output, Parts};
use crate::prefix_cache::PrefixCache;
use crate::prompt_images::ImagePrompt;
use crate::sampling::{Sampler, logprobs};
use crate::speculation::draft::{DraftCache, Wanted};
use crate::speculation::mtp::MtpState;
use crate::speculation::{Drawn, Method, Speculation, confirmed_guesses, ngram_draft};

pub(crate) struct Sequence<'m> {
    loaded: &'m LoadedModel,
    prompt: Vec<u32>,
    /// The prompt's images, where it has any.
    images: Option<ImagePrompt>,
    cached_tokens: usize,
    /// Where the prompt parted from what the prefix cache held, when it could tell.
    diverged_at: Option<usize>,
    /// Prompt positions in the cache so far (restored or prefilled).
    prefilled: usize,
    cache: Vec<KvCache>,
    /// Whether the last sampled token (the end of `history`) still has to go through the model.
    token_to_forward: bool,
    history: Vec<u32>,
    sampler: Sampler,
    constraint: Option<Constraint>,
    budget: ThinkingBudget,
    output: Output,
    single_call: bool,
    top_logprobs: Option<usize>,
    max_tokens: usize,
    generated: usize,
    pending: PendingTokens,
    started: Instant,
    prefill_time: Duration,
    decode_started: Option<Instant>,
    /// How this sequence guesses tokens ahead.
    speculation: Speculation,
    /// The draft model's cache of this sequence, where a draft model guesses.
    draft: Option<DraftCache>,
    /// The model's multi-token-prediction layer's state, where it guesses.
    mtp: Option<MtpState>,
    /// Positions the caches held when the last pass's input was laid out: its first position.
    pass_start: usize,
    /// The draft model's guesses for the next pass.
    drafted_ahead: Vec<u32>,
    /// The last sampled token and the guesses after it, while a pass checks them.
    guessed: Vec<u32>,
    /// Tokens guessed, and of those the ones the model confirmed.
    drafted: usize,
    accepted: usize,
}

impl<'m> Sequence<'m> {
    /// A sequence admitted to the batch: its cache holds what the prefix cache restored.
    pub(crate) fn start(
        loaded: &'m LoadedModel,
        request: &GenerateRequest,
        prepared: Prepared,
        sampler: Sampler,
        prefix: Option<&mut PrefixCache>,
        speculation: Speculation,
        draft: Option<&LoadedModel>,
    ) -> Self {
        let started = Instant::now();
        let prompt = prepared.tokens;
        let images = prepared.images;
        let (cache, cached_tokens, diverged_at) = match prefix {
            Some(prefix) => {
                let key = cache_key(images.as_ref(), &prompt, prompt.len());
                let restored = prefix.restore(&key, || loaded.model.new_cache());
                let mut cache = restored.caches;
                // What this sequence adds from its prompt's last whole block on is kept for the
                // prefix cache's tail, which a sliding window would otherwise let go of.
                let last_block = prompt.len() / prefix.block_tokens() * prefix.block_tokens();
                for layer in &mut cache {
                    layer.keep_from(last_block as i32);
                    // A recurrent layer records its state at each boundary, for the blocks.
                    layer.snapshot_every(prefix.block_tokens() as i32);
                }
                (cache, restored.cached_tokens, restored.diverged_at)
            }
            None => (loaded.model.new_cache(), 0, None),
        };
        let context = loaded.model.config.max_position_embeddings;
        let budget = request
            .output
            .reasoning_budget
            .filter(|_| prepared.constraint.is_none());
        Self {
            loaded,
            history: prompt.clone(),
            max_tokens: request.max_tokens.min(context.saturating_sub(prompt.len())),
            prompt,
            images,
            cached_tokens,
            diverged_at,
            prefilled: cached_tokens,
            cache,
            token_to_forward: false,
            sampler,
            constraint: prepared.constraint,
            budget: ThinkingBudget::new(loaded, budget),
            output: Output::new(
                loaded.tokenizer.clone(),
                &loaded.formats.kept_tokens,
                &request.stop,
                prepared.parser,
            ),
            single_call: prepared.single_call,
            top_logprobs: request.logprobs,
            generated: 0,
            pending: PendingTokens::default(),
            started,
            prefill_time: Duration::ZERO,
            decode_started: None,
            draft: draft
                .filter(|_| speculation.method == Method::Draft)
                .map(DraftCache::new),
            drafted_ahead: Vec::new(),
            mtp: loaded
                .model
                .new_mtp_cache()
                .filter(|_| speculation.method == Method::Mtp)
                .map(MtpState::new),
            pass_start: 0,
            speculation,
            guessed: Vec::new(),
            drafted: 0,
            accepted: 0,
        }
    }

    /// Whether this sequence guesses tokens ahead while it decodes.
    pub(crate) fn speculates(&self) -> bool {
        self.speculation.method != Method::Off
    }

    /// Tokens generated so far.
    pub(crate) fn generated(&self) -> usize {
        self.generated
    }

    pub(crate) fn prompt_tokens(&self) -> usize {
        self.prompt.len()
    }

    /// Prompt tokens the prefix cache restored.
    pub(crate) fn cached_tokens(&self) -> usize {
        self.cached_tokens
    }

    /// Gives what this sequence computed to the prefix cache: the tokens whose keys and values
    /// every layer holds, which leaves out the last sampled token (never run) and what a
    /// cancelled prefill did not reach.
    pub(crate) fn keep(&self, prefix: &mut PrefixCache) {
        let key = cache_key(self.images.as_ref(), &self.history, self.held());
        prefix.store_sequence(&key, self.prompt.len(), &self.cache);
    }

    /// Tokens whose keys and values (or state) every layer holds.
    fn held(&self) -> usize {
        let held = self.cache.iter().map(KvCache::offset).min().unwrap_or(0);
        usize::try_from(held).unwrap_or(0).min(self.history.len())
    }

    /// Prompt tokens not yet in the cache.
    pub(crate) fn unprefilled(&self) -> usize {
        self.prompt.len() - self.prefilled
    }

    /// This sequence's share of the next pass: its last sampled token (with the tokens it
    /// guesses after it, where the pass is `guessing`), or its next chunk of at
    /// most `budget` prompt tokens, which it takes from the budget; `None` while it has nothing
    /// to run. A chunk that reaches an image not yet encoded has the tower run on it first, on
    /// the same budget, and stops short of it until it is (an error is the tower's).
    pub(crate) fn next_input(
        &mut self,
        budget: &mut usize,
        guessing: bool,
    ) -> Result<Option<Segment<'_>>, Exception> {
        let mut embedded = Vec::new();
        self.pass_start = self.held();
        let tokens = if self.token_to_forward {
            if let Some(images) = &self.images {
                images.prepare_generated(&mut self.cache);
            }
            self.guessed.clear();
            if guessing {
                self.guess();
            }
            if self.guessed.is_empty() {
                &self.history[self.history.len() - 1..]
            } else {
                // A recurrent layer goes back over the guesses not taken by keeping each state.
                for layer in &mut self.cache {
                    layer.hold_each_state();
                }
                &self.guessed[..]
            }
        } else if self.unprefilled() > 0 && *budget > 0 {
            let mut end = (self.prefilled + *budget).min(self.prompt.len());
            if let Some(images) = &self.images {
                end = images.encode_reached(self.loaded, self.prefilled, end, budget)?;
                end = end.min(self.prefilled + *budget);
                if end == self.prefilled {
                    return Ok(None);
                }
                end = images.whole_images(self.prefilled, end);
                images.prepare_chunk(&mut self.cache, self.prefilled, end);
                embedded = images.rows_in(self.loaded, self.prefilled, end)?;
            }
            *budget = budget.saturating_sub(end - self.prefilled);
            &self.prompt[self.prefilled..end]
        } else {
            return Ok(None);
        };
        Ok(Some(Segment {
            tokens,
            cache: &mut self.cache,
            embedded,
        }))
    }

    /// Tokens this sequence may guess after its last sampled one: as many as may still be
    /// generated after it, up to the model's setting.
    fn guess_count(&self) -> usize {
        let room = self.max_tokens.saturating_sub(self.generated + 1);
        self.speculation.draft_tokens.min(room)
    }

    /// Whether a draft model guesses for this sequence's next pass: it decodes, with a draft.
    pub(crate) fn guesses_by_draft(&self) -> bool {
        self.token_to_forward && self.draft.is_some()
    }

    /// What the draft model needs to guess for this sequence's next pass, while it decodes.
    pub(crate) fn wants_draft(&mut self) -> Option<Wanted<'_>> {
        if !self.token_to_forward {
            return None;
        }
        let count = self.guess_count();
        Some(Wanted {
            history: &self.history,
            cache: self.draft.as_mut()?,
            count,
        })
    }

    /// The draft model's guesses for the next pass.
    pub(crate) fn receive_draft(&mut self, guesses: Vec<u32>) {
        self.drafted_ahead = guesses;
    }

    /// Guesses the tokens after the last sampled one, as many as may still be generated, and
    /// lays them out after it as the next input (`guessed`); none where the method finds none.
    fn guess(&mut self) {
        let count = self.guess_count();
        let mut drafted = std::mem::take(&mut self.drafted_ahead);
        if let Some(mtp) = self.mtp.as_mut().filter(|_| count > 0) {
            // A failed guess only costs the guesses.
            drafted = mtp
                .guess(&self.loaded.model, count)
                .inspect_err(|error| tracing::warn!(%error, "the multi-token-prediction layer failed; no guesses"))
                .unwrap_or_default();
        }
        let mut draft = match self.speculation.method {
            Method::Ngram if count > 0 => ngram_draft(&self.history, count),
            // A draft's larger vocabulary may hold ids the model has no row for.
            Method::Draft | Method::Mtp => {
                let vocab = self.loaded.model.config.vocab_size as u32;
                let known = drafted.iter().take_while(|&&token| token < vocab).count();
                &drafted[..known.min(count)]
            }
            Method::Ngram | Method::Off => &[],
        };
        if let Some(constraint) = self.constraint.as_mut() {
            // A guess the grammar forbids would be rejected anyway: it is not checked.
            draft = &draft[..constraint.allowed_prefix(draft)];
        }
        if !draft.is_empty() {
            let last = self.history.len() - 1;
            self.guessed.push(self.history[last]);
            self.guessed.extend_from_slice(draft);
        }
    }

    /// Samples from each row of a pass that checked guesses (`rows`: after the last token, then
    /// after each guess) while the sampled token is the guess, as plain decoding would have
    /// sampled them one pass each; the caches then forget the positions of the guesses not
    /// taken. Ends as [`Sequence::advance`] ends.
    pub(crate) fn check_guesses(
        &mut self,
        rows: Vec<Vec<f32>>,
        prefix: Option<&mut PrefixCache>,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Option<FinishReason>, GenerateError> {
        self.token_to_forward = false;
        let guesses = std::mem::take(&mut self.guessed).split_off(1);
        let mut outcome = Ok(None);
        let taken = confirmed_guesses(rows, &guesses, |row| {
            let generated = self.generated;
            outcome = self.advance(row, emit);
            // A guess the model sampled counts as taken even where its token ends the answer.
            let sampled = outcome.is_ok() && self.generated > generated;
            Drawn {
                token: self.history.last().copied().filter(|_| sampled),
                goes_on: matches!(outcome, Ok(None)),
            }
        });
        self.drafted += guesses.len();
        self.accepted += taken;
        let forgotten = (guesses.len() - taken) as i32;
        for cache in &mut self.cache {
            cache.forget_last(forgotten)?;
        }
        if let Some(prefix) = prefix {
            let key = cache_key(self.images.as_ref(), &self.history, self.held());
            prefix.store_decoded(&key, &mut self.cache);
        }
        outcome
    }

    /// Gives the multi-token-prediction layer, where it guesses, the pass's hidden states at
    /// the positions it confirmed (this sequence's rows of `hidden` from `first_row` on) beside
    /// the token after each.
    pub(crate) fn read_pass(&mut self, hidden: &Array, first_row: i32) -> Result<(), Exception> {
        let Some(mtp) = self.mtp.as_mut() else {
            return Ok(());
        };
        let held = self.cache.iter().map(KvCache::offset).min().unwrap_or(0);
        let confirmed = usize::try_from(held)
            .unwrap_or(0)
            .saturating_sub(self.pass_start);
        let next = self.history.get(self.pass_start + 1..).unwrap_or_default();
        let next = &next[..confirmed.min(next.len())];
        mtp.read(&self.loaded.model, hidden, first_row, next)
    }

    /// Records that a pass ran `length` tokens of this sequence's input; says whether the
    /// logits of its last position are the distribution of its next token. Each prompt chunk
    /// gives its whole blocks to the prefix cache.
    pub(crate) fn ran(&mut self, length: usize, prefix: Option<&mut PrefixCache>) -> bool {
        if self.token_to_forward {
            self.token_to_forward = false;
            // A recurrent layer may have recorded a boundary in this step.
            if let Some(prefix) = prefix {
                let key = cache_key(self.images.as_ref(), &self.history, self.held());
                prefix.store_decoded(&key, &mut self.cache);
            }
            return true;
        }
        self.prefilled += length;
        // Each chunk's whole blocks are kept as it completes them, before a sliding window
        // lets go of their positions.
        if let Some(prefix) = prefix {
            let key = cache_key(self.images.as_ref(), &self.prompt, self.prompt.len());
            prefix.store(&key, self.prefilled, &mut self.cache);
        }
        if self.unprefilled() > 0 {
            return false;
        }
        self.prefill_time = self.started.elapsed();
        self.decode_started = Some(Instant::now());
        true
    }

    /// Samples from `logits` (or feeds a forced token) and reports the text it makes; the
    /// sequence ends with the returned reason, or goes on with its token as its next input.
    pub(crate) fn advance(
        &mut self,
        mut logits: Vec<f32>,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Option<FinishReason>, GenerateError> {
        if self.generated >= self.max_tokens {
            return Ok(Some(FinishReason::Length));
        }
        let token = match self.budget.next_forced() {
            Some(token) => token,
            None => {
                if let Some(constraint) = self.constraint.as_mut() {
                    // Logprobs then describe the distribution the token was drawn from.
                    constraint.mask(&mut logits)?;
                }
                self.sampler.sample(&logits, &self.history)?
            }
        };
        self.history.push(token);
        self.generated += 1;
        self.pending
            .record(self.loaded, self.top_logprobs, &logits, token);
        if self.loaded.eos_token_ids.contains(&token) {
            return Ok(Some(FinishReason::Stop));
        }
        if let Some(constraint) = self.constraint.as_mut() {
            constraint.accept(token)?;
        }
        let step = self
            .output
            .push(token)
            .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
        if !step.parts.is_empty() {
            emit(self.pending.delta(step.parts));
        }
        self.budget.count(self.output.in_reasoning());
        let grammar_complete = self
            .constraint
            .as_ref()
            .is_some_and(Constraint::is_finished);
        let last_call_made = self.single_call && self.output.calls() > 0;
        if step.stopped || grammar_complete || last_call_made {
            return Ok(Some(FinishReason::Stop));
        }
        if self.generated >= self.max_tokens {
            return Ok(Some(FinishReason::Length));
        }
        self.token_to_forward = true;
        Ok(None)
    }

    /// Reports the held-back text and the sequence's `Done`.
    pub(crate) fn finish(
        mut self,
        finish_reason: FinishReason,
        emit: &mut dyn FnMut(Event),
    ) -> Result<(), GenerateError> {
        if finish_reason != FinishReason::Cancelled {
            let parts = self
                .output
                .finish()
                .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
            if !parts.is_empty() || self.pending.token_count > 0 {
                emit(self.pending.delta(parts));
            }
        }
        let finish_reason = match finish_reason {
            // The turn ended after calls: the client is to run them.
            FinishReason::Stop if self.output.calls() > 0 => FinishReason::ToolCalls,
            other => other,
        };
        let (images_encoded, image_encode) = self
            .images
            .as_ref()
            .map_or((0, Duration::ZERO), ImagePrompt::tower_work);
        emit(Event::Done {
            finish_reason,
            stop_sequence: self.output.stop_sequence().map(str::to_owned),
            timings: Timings {
                images_encoded,
                image_encode,
                drafted: self.drafted,
                accepted: self.accepted,
                prompt_tokens: self.prompt.len(),
                cached_tokens: self.cached_tokens,
                diverged_at: self.diverged_at,
                completion_tokens: self.generated,
                prefill: self.prefill_time,
                decode: self
                    .decode_started
                    .map_or(Duration::ZERO, |started| started.elapsed()),
            },
        });
        Ok(())
    }
}

/// The first `held` of `tokens` (a prompt and what followed it) as the prefix cache keys them:
/// an image's tokens stand for its pixels.
fn cache_key<'a>(
    images: Option<&'a ImagePrompt>,
    tokens: &'a [u32],
    held: usize,
) -> Cow<'a, [u32]> {
    let Some(key) = images.map(ImagePrompt::key) else {
        return Cow::Borrowed(&tokens[..held]);
    };
    if held <= key.len() {
        return Cow::Borrowed(&key[..held]);
    }
    Cow::Owned([key, &tokens[key.len()..held]].concat())
}

/// Logits `[rows, 1, vocab]` (or `[1, 1, vocab]`) as one f32 vector per row, in one copy.
pub(crate) fn host_rows(logits: &Array) -> Result<Vec<Vec<f32>>, Exception> {
    let logits = logits.as_dtype(Dtype::Float32)?;
    logits.eval()?;
    let vocab = logits.dim(-1).max(1) as usize;
    Ok(logits
        .as_slice::<f32>()
        .chunks(vocab)
        .map(<[f32]>::to_vec)
        .collect())
}

/// A limit on thinking: once the model has thought for its budget without closing its
/// reasoning block, the block's closing text is fed to it as if it had written it, and the
/// answer follows. Under a grammar the grammar alone decides, so there is no budget then.
struct ThinkingBudget {
    /// Thinking tokens still allowed; `None` when there is no budget or it was spent.
    left: Option<usize>,
    close: Vec<u32>,
    forced: VecDeque<u32>,
}

/// What closes a Qwen3- or DeepSeek-R1-style reasoning block, as those templates write it.
const CLOSE_REASONING: &str = "\n</think>\n\n";

impl ThinkingBudget {
    fn new(loaded: &LoadedModel, budget: Option<usize>) -> Self {
        let close = match budget {
            Some(_) => match loaded.tokenizer.encode(CLOSE_REASONING, false) {
                Ok(encoding) => encoding.get_ids().to_vec(),
                Err(error) => {
                    tracing::warn!(%error, "cannot tokenize the end of reasoning; no thinking budget");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        Self {
            left: budget.filter(|_| !close.is_empty()),
            close,
            forced: VecDeque::new(),
        }
    }

    /// The next token to feed instead of sampling, while the closing text is being fed.
    fn next_forced(&mut self) -> Option<u32> {
        self.forced.pop_front()
    }

    /// Counts a token the model wrote while `thinking`; at the budget, queues the closing text.
    fn count(&mut self, thinking: bool) {
        let Some(left) = self.left.as_mut().filter(|_| thinking) else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.forced.extend(self.close.iter().copied());
            self.left = None;
        }
    }
}

/// Tokens sampled since the last delta, with their log-probabilities when asked for.
#[derive(Default)]
struct PendingTokens {
    token_count: usize,
    logprobs: Vec<TokenLogprob>,
}

impl PendingTokens {
    fn record(&mut self, loaded: &LoadedModel, top: Option<usize>, logits: &[f32], token: u32) {
        self.token_count += 1;
        let Some(top) = top else {
            return;
        };
        let text_of = |id: u32| loaded.tokenizer.decode(&[id], false).unwrap_or_default();
        let computed = logprobs(logits, token, top);
        self.logprobs.push(TokenLogprob {
            token,
            text: text_of(token),
            logprob: computed.chosen_logprob,
            top: computed
                .top
                .into_iter()
                .map(|(id, logprob)| (id, text_of(id), logprob))
                .collect(),
        });
    }

    fn delta(&mut self, parts: Parts) -> Event {
        Event::Delta {
            text: parts.text,
            reasoning: parts.reasoning,
            tool_calls: parts.tool_calls,
            token_count: std::mem::take(&mut self.token_count),
            logprobs: std::mem::take(&mut self.logprobs),
        }
    }
}

/// The end of a request that ran nothing: a count, or one cancelled before its prefill.
pub(crate) fn done_without_compute(finish_reason: FinishReason, prompt_tokens: usize) -> Event {
    Event::Done {
        finish_reason,
        stop_sequence: None,
        timings: Timings {
            prompt_tokens,
            cached_tokens: 0,
            diverged_at: None,
            completion_tokens: 0,
            prefill: Duration::ZERO,
            decode: Duration::ZERO,
            images_encoded: 0,
            image_encode: Duration::ZERO,
            drafted: 0,
            accepted: 0,
        },
    }
}
